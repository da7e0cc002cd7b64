"""The saga worker killed with SIGKILL at a random moment of each switch — switchovers and switchbacks —
under traffic from two client libraries at their defaults, and another worker started a moment later.

kafkajs produces with its defaults (not idempotent: a resend racing a held write would be written
twice); confluent-kafka produces idempotently and consumes in a group that commits after each batch
(session time-out 30 s, so a commit held as long as clients are blocked is carried over, not refused).
Every saga must end switched or compensated, clients held at most 10 s in every trial (as each
application saw it: its longest wait between two acknowledgements), no send failed, nothing lost,
nothing written or processed twice, no key left blocked or locked. The seed of the random moments is
printed (``SWITCHYARD_CHAOS_SEED`` replays one); ``make bench`` runs more trials
(tests/bench/test_chaos_bench.py).
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.mirror.status import read_status
from switchyard.model import BindingState
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import saga_id
from switchyard.traffic import Traffic
from tests.helpers.chaos import Trial, proves_something
from tests.helpers.compat import App, longest_gap, unaccounted_sends
from tests.helpers.live import Live, unique
from tests.helpers.traffic import judge_consumer, judge_sends, topic_ids

pytestmark = pytest.mark.alone  # its bound on how long clients are held wants the machine to itself

ACTOR = "user:test"
HELD_MOST_S = 10.0
KILL_WITHIN_S = 2.0
"""The kill comes at a random moment this long after the saga was started: mostly while it runs."""
RESTART_WITHIN_S = 2.0
JS_RATE = 20
"""kafkajs's sends per second here, every one pipelined on one connection: through a 10 s hold, three
times the answers a connection may await (``gateway.limits.max_in_flight``, 64), within what it may hold
(``max_held``). ``make bench`` runs 50/s."""


def switch_with_a_kill(
    live: Live, routing: RoutingStore, kind: str, keys: list[str], extra: list[str], rng: random.Random
) -> tuple[str, float]:
    """Start the saga, kill the newest worker at a random moment, start another; the saga's outcome and
    when the kill came."""
    started = live.cli(kind, *keys, *extra, "--reason", "chaos")
    assert started.returncode == 0, started.stdout + started.stderr
    kill_after = rng.uniform(0, KILL_WITHIN_S)
    time.sleep(kill_after)
    live.kill_worker()
    time.sleep(rng.uniform(0, RESTART_WITHIN_S))
    live.start_worker()
    live.cli("sagas", "show", saga_id(keys), "--follow", timeout_s=300)
    run = routing.ledger.saga_runs(saga_id(keys))[0]
    assert run.outcome in ("switched", "compensated"), (run.outcome, run.result)
    return run.outcome, kill_after


def prepare(routing: RoutingStore, primary: str, topics: list[str]) -> str:
    """The topics on the primary, a link copying them, followed by the mirror."""
    kafka.create_topics(primary, topics, partitions=2)
    link = unique("link")
    routing.create_link(link, "primary", "standby", include=topics, actor=ACTOR, reason="t")
    deadline = time.monotonic() + 60
    while len([p for m in read_status(routing.zk, routing.layout, link) for p in m.partitions]) < 4:
        assert time.monotonic() < deadline, "the mirror never took up the link"
        time.sleep(0.2)
    return link


def run_trials(
    live: Live, routing: RoutingStore, stack_config: Config, tmp_path: Path, trials: int, js_rate: float
) -> list[Trial]:
    """Two applications bound to the primary, ``trials`` switches with a kill each, judged at the end;
    what each trial saw. kafkajs sends ``js_rate`` records/s, each in a request of its own, all on one
    connection."""
    assert live.gateway is not None
    gateway = live.gateway.bootstrap
    js = App("kafkajs", "one gateway", unique("chaos-js"), unique("chaos-js-t"), tmp_path / "kafkajs")
    py_app, py_topic = unique("chaos-py"), unique("chaos-py-t")
    keys = [js.app, py_app]
    link = prepare(routing, stack_config.clusters["primary"].bootstrap, [js.topic, py_topic])
    for app in keys:
        epoch = routing.set_binding(BindingKey.for_app(app), "primary", actor=ACTOR, reason="test")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    seed = int(os.environ.get("SWITCHYARD_CHAOS_SEED") or random.randrange(1 << 32))
    print(f"\nchaos seed {seed}")
    rng = random.Random(seed)
    traffic = Traffic(
        gateway, py_app, py_topic, unique("group"), idempotent=True, rate_per_s=200, session_s=30
    )
    done: list[Trial] = []
    timelines: list[str] = []
    js.start(gateway, rate=js_rate, consume=False)
    traffic.start()
    try:
        traffic.wait_for(200, timeout_s=90)  # the group's first join on Tansu: about half its session
        kind = "switchover"
        for _ in range(trials):
            since, since_wall = time.monotonic(), time.time()
            extra = ["--link", link] if not done else []
            outcome, kill_after = switch_with_a_kill(live, routing, kind, keys, extra, rng)
            until, until_wall = time.monotonic(), time.time()
            run = routing.ledger.saga_runs(saga_id(keys))[0]
            assert run.result is not None
            timelines.append(timeline(routing, run.run_id, run.started_at, since_wall))
            done.append(
                Trial(
                    kind, kill_after, outcome, run.result["pause_ms"] / 1000,
                    longest_gap(list(js.seen().acked.values()), since_wall, until_wall),
                    traffic.longest_silence(since, until)[0],
                )
            )  # fmt: skip
            if outcome == "switched":
                kind = "switchback" if kind == "switchover" else "switchover"
            produced = len(js.seen().acked), len(traffic.acked)
            while len(js.seen().acked) < produced[0] + 20 or len(traffic.acked) < produced[1] + 100:
                time.sleep(0.1)  # both produce on where they are now
    finally:
        js.stop()
        traffic.stop(timeout_s=120)
    for trial, steps in zip(done, timelines, strict=True):
        print(f"{trial}\n  {steps}")
    judge(live, routing, stack_config, keys, done, js, traffic)
    return done


def timeline(routing: RoutingStore, run_id: str, started_at: datetime, since_wall: float) -> str:
    """When each step attempt that ended ran, in seconds from the saga's start (the kill cuts one short,
    unrecorded): where a trial's hold went."""
    offset = started_at.timestamp()
    steps = " ".join(
        f"{s.step}#{s.attempt} {s.started_at.timestamp() - offset:.2f}-{s.ended_at.timestamp() - offset:.2f}"
        for s in routing.ledger.saga_steps(run_id)
    )
    return f"started {offset - since_wall:.2f}s after the CLI; {steps}"


def judge(
    live: Live, routing: RoutingStore, stack_config: Config, keys: list[str], done: list[Trial], js: App,
    traffic: Traffic,
) -> None:  # fmt: skip
    binding = routing.binding(BindingKey.for_app(keys[1]))
    assert binding is not None
    assert binding.state is BindingState.ACTIVE
    assert live.cli("sagas", "unlock", *keys).stdout == "".join(f"{k}: not locked\n" for k in keys)
    proves_something(done)
    held = [t for t in done if max(t.js_held_s, t.confluent_held_s) > HELD_MOST_S]
    assert not held, f"clients held longer than {HELD_MOST_S:g}s: {held}"
    final = stack_config.clusters[binding.cluster].bootstrap
    judge_sends(traffic, final)
    print(f"confluent consumer: {judge_consumer(traffic, carried=True)}")
    seen = js.seen()
    assert js.exit_code == 0, js.log_tail()
    assert seen.failed == [], seen.failed[:5]
    assert unaccounted_sends(seen) == []
    on_final = Counter(topic_ids(final, js.topic))
    assert set(on_final) == set(seen.acked), f"lost: {sorted(set(seen.acked) - set(on_final))[:10]}"
    assert max(on_final.values()) == 1, f"twice: {sorted(v for v, n in on_final.items() if n > 1)[:10]}"


def test_a_worker_killed_at_any_moment_of_a_switch_costs_seconds_and_nothing_else(
    live: Live, routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    run_trials(live, routing, stack_config, tmp_path, trials=4, js_rate=JS_RATE)
