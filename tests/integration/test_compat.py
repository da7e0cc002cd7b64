"""Client compatibility: five client libraries at their default settings (one application's session
time-outs too, ``AT_DEFAULTS``) through a round trip of sagas (switchover, switchback, switchover),
through one gateway and through a pair of gateways, the Java client at its defaults and with the
consumer group protocol (KIP-848), as librdkafka is too (``<library>/consumer``); in rounds
(``ROUNDS``), for the load on two cores. One more round trip runs the classic protocol's five libraries
between Apache Kafka 3.9 in ZooKeeper mode and 4.x in KRaft mode (tests/helpers/estates.py), through one
gateway.

Each library runs two applications of its own (``tests/compat``), one reaching the clusters through one
gateway, one through a pair: each a producer with acks=all, sending through one producer per compression
codec the library supports (``CODECS``), and two consumer groups, one committing synchronously after each
processed batch, one on the library's default auto-commit. All of a round trip's applications are moved
by the same sagas, and judged by what they saw: every send it attempted reported exactly once,
acknowledged (none failed, none left without a report when its client stopped waiting), every
acknowledged record processed, none processed twice by the committing group, every record on the final
cluster exactly once, each application ending with exit code 0; and at every switch, sends held less
than a session time-out (a switch back once waited for the members the switch over had moved to expire
there) and processing again within 3 s of the flip beyond the library's own first join time (measured
at the start of the same run) and its first fetch's longest wait (``FETCH_WAIT_S``). The auto-commit
groups' duplicates are reported, not judged: auto-commit promises no more.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient

from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import saga_id
from switchyard.usage import decode
from tests.helpers.compat import (
    CODECS,
    LIBRARIES,
    App,
    judge,
    last_records,
    longest_gap,
    prepare,
    table,
    wait_until,
)
from tests.helpers.live import Live, unique
from tests.helpers.processes import GatewayProcess
from tests.helpers.stacks import QUICK_CONSUMER

pytestmark = pytest.mark.alone  # its bound on how long clients are held wants the machine to itself

SETUPS = ("one gateway", "pair")
"""Each library runs twice at once: through one gateway, and through a pair (both listed in its
bootstrap servers, so its clients spread over the two; the round's first library lists the second
alone, so that the second gateway serves an application in every round)."""
PARTITIONS = 3
LOG_START = 25
"""Records deleted from each partition before the link (tests/helpers/compat.py ``prepare``)."""
RATE = 30
"""Records per second per application: eight of them, a mirror and two gateways share two cores."""
RESUME_MARGIN_S = 3.0
FETCH_WAIT_S = {"confluent-kafka": 0.5, "kafka-python": 0.5, "aiokafka": 0.5, "kafkajs": 5.0, "java": 0.5}
FETCH_WAIT_S |= {"confluent-kafka/consumer": 0.5, "java/consumer": 0.5}
"""Each library's default longest fetch wait. Tansu holds a fetch that long even when records arrive
(docs/testbed.md): a consumer that rejoins at the end of the log waits it out once before its first
records, which a broker that answers on arrival would not make it do."""
HELD_MOST_S = 9.0
"""Sends held longer at a switch than this fail the test: less than the shortest default session
time-out of the five (10 s), so a switch that waits for members to expire (kafkajs: 30 s) fails, and
beyond any hold of a switch that did not wait for one: 1-4 s here, 6.1-6.8 s for every library at the
first switch of a CI run on a slower machine."""
SWITCHES = (("switchover", "standby"), ("switchback", "primary"), ("switchover", "standby"))
AT_DEFAULTS = ("aiokafka", "one gateway")
"""The application whose consumers keep their library's default session time-out (aiokafka: 10 s). Were
a moved member not removed from the cluster it left, the switch back would wait that long for it to
expire, clients held. The others use the testbed's 6 s (docs/testbed.md): every switch waits for the
slowest application's rejoin, and a join round on Tansu takes half the session time-out (kafkajs's
default: 15 s a switch). ``SWITCHYARD_COMPAT_DEFAULTS=all`` runs all eight at their defaults (2 minutes
instead of 1)."""
QUICK_SESSION_MS = QUICK_CONSUMER["session.timeout.ms"]


ROUNDS = {
    "four": ["confluent-kafka", "kafka-python", "aiokafka", "kafkajs"],
    "java": ["java"],
    "new-protocol": ["confluent-kafka/consumer", "java/consumer"],
}
"""The libraries of each round trip, apart for the load on two cores. Fourteen applications at once
held sends 9 s at a switch: the gateway process they share is busy with their traffic, and a switch
costs a client several round trips behind it (the Java client's sends were held 1.0-1.4 s at each
switch alone, 1.9-3.5 s beside four other applications; docs/testbed.md)."""


assert sorted(n for names in ROUNDS.values() for n in names) == sorted(LIBRARIES), "every library in a round"


def libraries(round_: str) -> list[str]:
    """The libraries of one round trip (``ROUNDS``): all of them, or those of them
    ``SWITCHYARD_COMPAT_LIBRARIES`` names (comma-separated), to look into one."""
    named = [n for n in os.environ.get("SWITCHYARD_COMPAT_LIBRARIES", "").split(",") if n]
    unknown = set(named) - set(LIBRARIES)
    if unknown:
        raise pytest.UsageError(
            f"SWITCHYARD_COMPAT_LIBRARIES: no such library {sorted(unknown)}; {list(LIBRARIES)}"
        )
    return [n for n in ROUNDS[round_] if not named or n in named]


def at_defaults(a: App) -> bool:
    return (a.library, a.setup) == AT_DEFAULTS or os.environ.get("SWITCHYARD_COMPAT_DEFAULTS") == "all"


@dataclass
class Switch:
    kind: str
    started: float
    """Wall clock, as the applications log."""
    flipped: float
    ended: float
    held_s: float
    """Clients held, by the saga's own account (block to flip acknowledged)."""


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


@pytest.mark.parametrize("round_", list(ROUNDS))
def test_five_client_libraries_see_nothing_of_a_switchover_through_one_gateway_or_a_pair(
    live: Live, routing: RoutingStore, stack_config: Config, tmp_path: Path, round_: str
) -> None:
    if not libraries(round_):
        pytest.skip(f"SWITCHYARD_COMPAT_LIBRARIES names no library of round {round_}")
    judged_round_trip(live, routing, stack_config, tmp_path, libraries(round_), SETUPS)


def test_client_libraries_see_nothing_of_switches_between_kafka_3_9_on_zookeeper_and_4_x_on_kraft(
    legacy_live: Live, legacy_routing: RoutingStore, legacy_config: Config, tmp_path: Path
) -> None:
    """The round trip from a 3.9 cluster in ZooKeeper mode to a 4.x KRaft cluster and back, the libraries
    of the classic group protocol (a gateway serving a 3.9 cluster offers no KIP-848 group: the
    versions it offers are those every cluster takes)."""
    named = [n for n in (*ROUNDS["four"], *ROUNDS["java"]) if n in libraries("four") + libraries("java")]
    if not named:
        pytest.skip("SWITCHYARD_COMPAT_LIBRARIES names none of the classic protocol's libraries")
    judged_round_trip(legacy_live, legacy_routing, legacy_config, tmp_path, named, ("one gateway",))


def judged_round_trip(
    live: Live,
    routing: RoutingStore,
    config: Config,
    tmp_path: Path,
    names: list[str],
    setups: tuple[str, ...],
) -> None:
    """Each library of ``names`` in each of ``setups`` through the SWITCHES, judged (see the module)."""
    assert live.gateway is not None
    second = None
    if "pair" in setups:
        second = GatewayProcess(
            live.path, root=live.root, gateway_id="gw-pair", log=tmp_path / "gw-pair.log", overrides=live.env
        )
        second.start()
    try:
        bootstraps = {"one gateway": live.gateway.bootstrap}
        if second is not None:
            bootstraps |= {
                "pair": f"{second.bootstrap},{live.gateway.bootstrap}",
                # its first library's through the second alone: each client of an application picks one of
                # the servers listed at random and stays with the brokers that one advertises, so with both
                # listed a round of one library (the Java client's) used only one gateway in 1 run of ~30
                f"pair:{names[0]}": second.bootstrap,
            }
        apps = [
            App(lib, setup, unique("compat"), unique("compat-t"),
                tmp_path / setup.replace(" ", "-") / lib.replace("/", "-"))
            for setup in setups
            for lib in names
        ]  # fmt: skip
        # the first records deleted before the link: the copy's offsets differ, and clients on the
        # standby see the primary's through the gateway (docs/gateway.md, offsets that differ)
        link = prepare(routing, config, apps, partitions=PARTITIONS, log_start=LOG_START)
        switches, before, after = round_trip(live, routing, apps, bootstraps, link)
        gateways = ("gw-live", "gw-pair") if second is not None else ("gw-live",)
        seen_by = {g: apps_through(routing, g) for g in gateways}
    finally:
        if second is not None:
            second.stop()
    for a in apps:
        a.gateways = "+".join(g for g, seen in seen_by.items() if a.app in seen)

    primary, standby = (config.clusters[c].bootstrap for c in ("primary", "standby"))
    rows, switch_rows, problems = [], [], []
    for a in apps:
        row, found = judge(a, standby, primary)
        rows.append(row)
        problems += [f"{a.name}: {p}" for p in found]
        for number, switch in enumerate(switches):
            row, found = judge_switch(a, switches, number)
            switch_rows.append(row)
            problems += [f"{a.name}, {switch.kind} {number + 1}: {p}" for p in found]
    print("\n" + table(rows) + "\n\n" + table(switch_rows) + "\n\n" + held_table(switches, switch_rows))
    assert not problems, "\n".join(problems)
    assert {a.gateways for a in apps if a.setup == "one gateway"} == {"gw-live"}
    if second is not None:
        through_pair = {g for a in apps if a.setup == "pair" for g in a.gateways.split("+")}
        assert "gw-pair" in through_pair, through_pair
        assert through_pair <= {"gw-live", "gw-pair"}, through_pair
    real = {described(b, apps[0].topic, "direct")[0] for b in (primary, standby)}
    kafka_python_logs = "".join(a.log_tail(None) for a in apps if a.library == "kafka-python")
    same_topic_throughout(before, after, real, kafka_python_logs)


def apps_through(routing: RoutingStore, gateway_id: str) -> set[str]:
    """The applications whose requests ``gateway_id`` reports having seen."""
    data, _ = routing.zk.get(routing.layout.usage(gateway_id))
    return {use.app for use in decode(data)}


def round_trip(
    live: Live, routing: RoutingStore, apps: list[App], bootstraps: dict[str, str], link: str
) -> tuple[list[Switch], tuple[str, set[int]], tuple[str, set[int]]]:
    """Run the applications through the SWITCHES; each switch, and what a client saw of the first topic
    before and after them."""
    gateway = bootstraps["one gateway"]
    keys = [a.app for a in apps]
    switches: list[Switch] = []
    try:
        for a in apps:
            session_ms = None if at_defaults(a) else QUICK_SESSION_MS
            bootstrap = bootstraps.get(f"{a.setup}:{a.library}", bootstraps[a.setup])
            a.start(bootstrap, rate=RATE, codecs=CODECS[a.library], session_ms=session_ms)
        wait_until("first records", apps, lambda a, s: len(s.acked) >= 100 and s.batches["manual"], 120)
        for a in apps:
            a.joined = a.seen().batches["manual"][0]["t"] - a.started
        before = described(gateway, apps[0].topic, apps[0].app)
        for kind, cluster in SWITCHES:
            watch = FlipWatch(routing, BindingKey.for_app(apps[0].app), cluster)
            started = time.time()
            try:
                run = live.cli(kind, *keys, "--link", link, "--wait", "--reason", "compat")
            finally:
                watch.stop()
            assert run.returncode == 0, run.stdout + run.stderr
            assert watch.at is not None
            result = routing.ledger.saga_runs(saga_id(keys))[0].result
            assert result is not None
            flipped, link = watch.at, result["reverse_link"]  # the way back
            switches.append(Switch(kind, started, flipped, time.time(), result["pause_ms"] / 1000))
            wait_until(
                f"traffic after the {kind}", apps,
                lambda a, s: sum(t > flipped for t in s.acked.values()) >= 2 * RATE  # noqa: B023
                and len(s.received("manual")) >= len(s.acked) - 2 * RATE,
                120,
            )  # fmt: skip
        after = described(gateway, apps[0].topic, apps[0].app)
        last_records(apps, 90)
    finally:
        for a in apps:
            a.stop()
    return switches, before, after


def judge_switch(a: App, switches: list[Switch], number: int) -> tuple[dict[str, Any], list[str]]:
    """What the application saw of one switch: how long its sends were held, when it processed again."""
    s, switch = a.seen(), switches[number]
    until = switches[number + 1].started if number + 1 < len(switches) else float("inf")
    held = longest_gap(list(s.acked.values()), switch.started, switch.ended)
    resumed = s.first_batch("manual", switch.flipped)
    resume_s = resumed - switch.flipped if resumed is not None else float("inf")
    # kafka-python 3.0.12 sometimes joins twice: a join that completes between two polls is dropped and
    # a new JoinGroup sent (one more of Tansu's join delays), at the first join as after a switch. The
    # bound is the broker's join time for each round the library made.
    first_rounds, rounds_after = a.join_rounds(0, switches[0].flipped), a.join_rounds(switch.flipped, until)
    bound_s = a.joined / first_rounds * rounds_after + FETCH_WAIT_S[a.library] + RESUME_MARGIN_S
    row = {
        "library": a.library,
        "through": a.setup,
        "switch": f"{number + 1} {switch.kind}",
        "sends held s": round(held, 2),
        "resumed s": round(resume_s, 1),
        "join rounds": f"{first_rounds}/{rounds_after}",
    }
    problems = [
        *([f"sends held {held:.1f}s (the saga held clients {switch.held_s:.1f}s)"]
          if held > HELD_MOST_S else []),
        *([f"resumed {resume_s:.1f}s after the flip, first join took {a.joined:.1f}s in {first_rounds} "
           f"round(s), {rounds_after} after the flip"]
          if resume_s > bound_s else []),
    ]  # fmt: skip
    return row, problems


def held_table(switches: list[Switch], rows: list[dict[str, Any]]) -> str:
    """Per switch: clients held by the saga's account, and sends held by the applications' (p50, max)."""
    lines = []
    for number, switch in enumerate(switches):
        held = [r["sends held s"] for r in rows if r["switch"] == f"{number + 1} {switch.kind}"]
        lines.append({
            "switch": f"{number + 1} {switch.kind}",
            "saga: clients held s": round(switch.held_s, 2),
            "apps: sends held p50 s": round(statistics.median(held), 2),
            "max s": round(max(held), 2),
        })  # fmt: skip
    return table(lines)


def same_topic_throughout(
    before: tuple[str, set[int]], after: tuple[str, set[int]], real_ids: set[str], kafka_python_log: str
) -> None:
    """One topic id and no leader epoch through the switch, though each cluster has its own id."""
    assert len(real_ids) == 2, real_ids
    assert before[0] not in real_ids
    assert before == after
    assert before[1] == {-1}
    assert "topic_id changed" not in kafka_python_log
