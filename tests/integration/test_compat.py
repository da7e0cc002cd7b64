"""Client compatibility: four client libraries at their default settings, through one switchover saga,
through one gateway and through a pair of gateways.

Each library runs two applications of its own (``tests/compat``), one reaching the clusters through one
gateway, one through a pair: each a producer with acks=all and two consumer groups, one committing
synchronously after each processed batch, one on the library's default auto-commit. All eight are moved
to the standby by the same switchover, and judged by what they saw:
every send it attempted reported exactly once, acknowledged (none failed, none left without a report
when its client stopped waiting), every acknowledged record processed, none processed twice by the
committing group, nothing on the old cluster after the block, each application ending with exit code 0,
and processing again within 3 s of the flip beyond the library's own first join on this broker
(measured at the start of the same run: Tansu's join delay grows with the session time-out, which each
library sets differently). The auto-commit groups' duplicates are reported, not judged: auto-commit
promises no more.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.mirror.status import read_status
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from switchyard.usage import Use
from tests.helpers.compat import LIBRARIES, App, unaccounted_sends, wait_until
from tests.helpers.live import Live, unique
from tests.helpers.processes import GatewayProcess
from tests.helpers.traffic import topic_ids

SETUPS = ("one gateway", "pair")
"""Each library runs twice at once: through one gateway, and through a pair (both listed in its
bootstrap servers, so its connections spread over the two)."""
PARTITIONS = 3
RATE = 30
"""Records per second per application: eight of them, a mirror and two gateways share two cores."""
RESUME_MARGIN_S = 3.0
ACTOR = "user:test"


def described(bootstrap: str, topic: str, client_id: str) -> tuple[str, set[int]]:
    """The topic's id and its partitions' leader epochs, as a client (kafka-python's admin) sees them."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id)
    try:
        (found,) = admin.describe_topics([topic])
    finally:
        admin.close()
    return found["topic_id"], {p["leader_epoch"] for p in found["partitions"]}


class FlipWatch:
    """When the binding of ``key`` turned active on ``cluster`` (wall clock, as the applications log)."""

    def __init__(self, routing: RoutingStore, key: BindingKey, cluster: str) -> None:
        self.at: float | None = None
        self._stop = threading.Event()

        def watch() -> None:
            while self.at is None and not self._stop.is_set():
                binding = routing.binding(key)
                if binding is not None and binding.cluster == cluster and binding.state.value == "active":
                    self.at = time.time()
                time.sleep(0.02)

        self._thread = threading.Thread(target=watch, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def test_four_client_libraries_see_nothing_of_a_switchover_through_one_gateway_or_a_pair(
    live: Live, routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    assert live.gateway is not None
    second = GatewayProcess(
        live.path, root=live.root, gateway_id="gw-pair", log=tmp_path / "gw-pair.log", overrides=live.env
    )
    second.start()
    try:
        bootstraps = {
            "one gateway": live.gateway.bootstrap,
            "pair": f"{second.bootstrap},{live.gateway.bootstrap}",
        }
        apps = [
            App(lib, setup, unique("compat"), unique("compat-t"), tmp_path / setup.replace(" ", "-") / lib)
            for setup in SETUPS
            for lib in LIBRARIES
        ]
        link = prepare(routing, stack_config, apps)
        flipped, before, after = switch_over(live, routing, apps, bootstraps, link)
        seen_by = {g: apps_through(routing, g) for g in ("gw-live", "gw-pair")}
    finally:
        second.stop()
    for a in apps:
        a.gateways = "+".join(g for g, seen in seen_by.items() if a.app in seen)

    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    rows, problems = [], []
    for a in apps:
        row, found = judge(a, flipped, primary, standby)
        rows.append(row)
        problems += [f"{a.name}: {p}" for p in found]
    print("\n" + table(rows))
    assert not problems, "\n".join(problems)
    assert {a.gateways for a in apps if a.setup == "one gateway"} == {"gw-live"}
    assert {"gw-live", "gw-pair"} <= {g for a in apps if a.setup == "pair" for g in a.gateways.split("+")}
    real = {described(b, apps[0].topic, "direct")[0] for b in (primary, standby)}
    kafka_python_logs = "".join(a.log_tail(None) for a in apps if a.library == "kafka-python")
    same_topic_throughout(before, after, real, kafka_python_logs)


def apps_through(routing: RoutingStore, gateway_id: str) -> set[str]:
    """The applications whose requests ``gateway_id`` reports having seen."""
    data, _ = routing.zk.get(routing.layout.usage(gateway_id))
    return {Use.of(row).app for row in json.loads(data)["uses"]}


def prepare(routing: RoutingStore, stack_config: Config, apps: list[App]) -> str:
    """Each application's topic on the primary, one link copying them all, each bound to the primary."""
    kafka.create_topics(
        stack_config.clusters["primary"].bootstrap, [a.topic for a in apps], partitions=PARTITIONS
    )
    link = unique("link")
    routing.create_link(link, "primary", "standby", include=[a.topic for a in apps], actor=ACTOR, reason="t")
    for a in apps:
        epoch = routing.set_binding(BindingKey.for_app(a.app), "primary", actor=ACTOR, reason="test")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    deadline = time.monotonic() + 60
    while (
        len([p for m in read_status(routing.zk, routing.layout, link) for p in m.partitions])
        < len(apps) * PARTITIONS
    ):
        assert time.monotonic() < deadline, "the mirror never took up the link"
        time.sleep(0.2)
    return link


def switch_over(
    live: Live, routing: RoutingStore, apps: list[App], bootstraps: dict[str, str], link: str
) -> tuple[float, tuple[str, set[int]], tuple[str, set[int]]]:
    """Run the applications through one switchover saga; when the flip was, and what a client saw of
    the first topic before and after it."""
    gateway = bootstraps["one gateway"]
    watch = FlipWatch(routing, BindingKey.for_app(apps[0].app), "standby")
    try:
        for a in apps:
            a.start(bootstraps[a.setup], rate=RATE)
        wait_until("first records", apps, lambda a, s: len(s.acked) >= 100 and s.batches["manual"], 120)
        for a in apps:
            a.joined = a.seen().batches["manual"][0]["t"] - a.started
        before = described(gateway, apps[0].topic, apps[0].app)

        over = live.cli("switchover", *[a.app for a in apps], "--link", link, "--wait", "--reason", "compat")
        assert over.returncode == 0, over.stdout + over.stderr
        assert watch.at is not None
        flipped = watch.at
        after = described(gateway, apps[0].topic, apps[0].app)
        wait_until(
            "traffic after the flip", apps,
            lambda a, s: sum(t > flipped for t in s.acked.values()) >= 100
            and len(s.received("manual")) >= len(s.acked) - 2 * RATE,
            120,
        )  # fmt: skip
        for a in apps:
            a.signal("stop-producing")
        wait_until("the producers' last records", apps, lambda a, s: s.produced is not None, 150)
        wait_until(
            "the consumers' last records", apps,
            lambda a, s: all(set(s.acked) <= set(s.received(g)) for g in ("manual", "auto")),
            90,
        )  # fmt: skip
    finally:
        watch.stop()
        for a in apps:
            a.stop()
    return flipped, before, after


def judge(a: App, flipped: float, primary: str, standby: str) -> tuple[dict[str, Any], list[str]]:
    """The application's row of figures, and what it saw that it should not have."""
    s = a.seen()
    manual, auto = s.received("manual"), s.received("auto")
    refused = Counter(b["commit"] for b in s.batches["manual"] if b["commit"])
    resumed = s.first_batch("manual", flipped)
    resume_s = resumed - flipped if resumed is not None else float("inf")
    # kafka-python 3.0.12 sometimes joins twice: a join that completes between two polls is dropped and
    # a new JoinGroup sent (one more of Tansu's join delays), at the first join as after a switch. The
    # bound is the broker's join time for each round the library made.
    first_rounds, rounds_after = a.join_rounds(0, flipped), a.join_rounds(flipped)
    bound_s = a.joined / first_rounds * rounds_after + RESUME_MARGIN_S
    on_standby = Counter(v for v in topic_ids(standby, a.topic))
    leaked = set(topic_ids(primary, a.topic)) - set(on_standby)
    row = {
        "library": a.library,
        "through": a.setup,
        "gateways used": a.gateways,
        "sent": s.produced,
        "acked": len(s.acked),
        "failed sends": len(s.failed),
        "lost": len(set(s.acked) - set(manual)),
        "twice": sum(n > 1 for n in manual.values()),
        "commits refused": sum(refused.values()),
        "first join s": round(a.joined, 1),
        "resumed s": round(resume_s, 1),
        "join rounds": f"{first_rounds}/{rounds_after}",
        "auto-commit twice": sum(n > 1 for n in auto.values()),
        "exit": a.exit_code,
    }
    problems = [
        *unaccounted_sends(s),
        *(["sends failed: " + "; ".join(s.failed[:3])] if s.failed else []),
        *([f"{row['lost']} acknowledged records never processed"] if row["lost"] else []),
        *([f"{row['twice']} records processed twice"] if row["twice"] else []),
        *([f"commits refused: {dict(refused)}"] if refused else []),
        *([f"resumed {resume_s:.1f}s after the flip, first join took {a.joined:.1f}s in {first_rounds} "
           f"round(s), {rounds_after} after the flip"]
          if resume_s > bound_s else []),
        *([f"not on the standby exactly once: {sorted(set(s.acked) ^ set(on_standby))[:5]}"]
          if set(on_standby) != set(s.acked) or max(on_standby.values()) > 1 else []),
        *([f"on the primary only: {sorted(leaked)[:5]}"] if leaked else []),
        *([f"lost to the auto-commit group: {sorted(set(s.acked) - set(auto))[:5]}"]
          if set(s.acked) - set(auto) else []),
        *s.errors[:3],
        *([f"exit code {a.exit_code}" if a.exit_code is not None else "still running 30 s after its stop"]
          if a.exit_code != 0 else []),
    ]  # fmt: skip
    return row, problems


def same_topic_throughout(
    before: tuple[str, set[int]], after: tuple[str, set[int]], real_ids: set[str], kafka_python_log: str
) -> None:
    """One topic id and no leader epoch through the switch, though each cluster has its own id."""
    assert len(real_ids) == 2, real_ids
    assert before[0] not in real_ids
    assert before == after
    assert before[1] == {-1}
    assert "topic_id changed" not in kafka_python_log


def table(rows: list[dict[str, Any]]) -> str:
    columns = list(rows[0])
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(str(r[c]).ljust(w) for c, w in zip(columns, widths, strict=True)) for r in rows]
    return "\n".join(lines)
