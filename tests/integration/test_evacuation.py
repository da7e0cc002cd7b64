"""A whole cluster moved: every topic of an Apache Kafka 3.9 cluster in ZooKeeper mode, and every
application using them, evacuated to a 4.x KRaft cluster in batches, under load, with no client
reconfigured or restarted (tests/helpers/estates.py; docs/runbooks/cluster-move.md).

Five client libraries at their defaults each run an application of their own (a producer with acks=all,
a committing consumer group and an auto-committing one, tests/compat), and a topic nobody uses holds
records of its own. Judged by what the applications saw (tests/helpers/compat.py ``judge``): every send
acknowledged once, every acknowledged record processed, none twice by the committing group, every record
on the new cluster exactly once, each application still the process it was."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from switchyard import kafka
from switchyard.config import Config
from switchyard.mirror.control import delete_link
from switchyard.moves.cluster import INTERNAL_PREFIXES
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import evacuation_id
from tests.helpers.compat import CODECS, App, judge, table, wait_until
from tests.helpers.live import Live, capture, unique, wait_for_approval

LIBRARIES = ("confluent-kafka", "kafka-python", "aiokafka", "kafkajs", "java")
PARTITIONS = 3
RATE = 30
"""Records per second per application (five applications, a mirror and a gateway share two cores)."""
IDLE_RECORDS = 100


@pytest.fixture(autouse=True)
def _source_emptied(legacy_routing: RoutingStore, legacy_config: Config) -> Iterator[None]:
    """Each test evacuates the module's 3.9 cluster whole: what one leaves there (a batch rolled back, its
    links) is removed after it."""
    yield
    primary = legacy_config.clusters["primary"].bootstrap
    for link in list(legacy_routing.snapshot().links.values()):
        if "primary" in (link.source, link.target):
            delete_link(legacy_config, legacy_routing, link.id, actor="user:test", reason="tidy", force=True)
    for topic in {
        t for t, _ in kafka.partitions(primary, lambda name: not name.startswith(INTERNAL_PREFIXES))
    }:
        kafka.delete_topic(primary, topic)


def test_a_cluster_on_kafka_3_9_is_evacuated_to_4_x_in_batches_under_load_though_its_worker_dies(
    legacy_live: Live, legacy_routing: RoutingStore, legacy_config: Config, tmp_path: Path
) -> None:
    live, config = legacy_live, legacy_config
    assert live.gateway is not None
    primary, standby = (config.clusters[c].bootstrap for c in ("primary", "standby"))
    apps = [App(lib, "one gateway", unique("evac"), unique("evac-t"), tmp_path / lib) for lib in LIBRARIES]
    idle = unique("evac-idle")
    kafka.create_topics(primary, [a.topic for a in apps] + [idle], partitions=PARTITIONS)
    seeded = [kafka.Record(None, str(i).encode(), partition=i % PARTITIONS) for i in range(IDLE_RECORDS)]
    assert kafka.produce(primary, idle, seeded) == IDLE_RECORDS
    saga = evacuation_id("primary")
    with _running(apps, live.gateway.bootstrap):
        started = live.cli("evacuate", "primary", "--to", "standby", "--batch", "2", "--approve-batches",
                           "--reason", "move off ZooKeeper")  # fmt: skip
        assert started.returncode == 0, started.stdout + started.stderr
        for number in (1, 2, 3):
            wait_for_approval(live, saga, timeout_s=180)
            if number == 2:  # between two batches: the worker dies, another takes the saga up
                live.kill_worker()
                live.start_worker()
            _approve(live, saga, f"batch {number}")
            _wait_switched(live, saga, number)
        wait_for_approval(live, saga, timeout_s=180)  # before deleting anything on the source
    rows, problems = [], []
    for a in apps:
        row, found = judge(a, standby, primary)
        rows.append(row)
        problems += [f"{a.name}: {p}" for p in found]
    print("\n" + table(rows))
    assert not problems, "\n".join(problems)

    _approve(live, saga, "retirement")
    result = _ended(legacy_routing, saga)
    capture(live, saga, legacy_routing.ledger.saga_runs(saga)[0].run_id, "evacuation-live")
    report = live.cli("report", saga)
    print(report.stdout)
    assert report.returncode == 0, report.stdout + report.stderr
    assert report.stdout.count("switchover") >= 3, report.stdout
    assert result["outcome"] == "evacuated", result["detail"]
    batches = result["batches"]
    assert [b["outcome"] for b in batches] == ["switched"] * 3
    assert sorted(t for b in batches for t in b["topics"]) == sorted(a.topic for a in apps)
    assert [len(b["topics"]) for b in batches] == [2, 2, 1]
    assert result["unused"] == [idle]
    assert sorted(result["retired"]) == sorted([idle, *(a.topic for a in apps)])
    left = kafka.partitions(primary, lambda name: name in result["retired"])
    assert not left, f"still on the source: {left}"
    copied = [r.value or b"" for rs in kafka.read_partitions(standby, idle).values() for r in rs]
    assert sorted(copied) == sorted(r.value or b"" for r in seeded)  # copied exactly before its source went
    assert not [link for link in legacy_routing.snapshot().links.values() if link.source == "primary"]


@contextmanager
def _running(apps: list[App], bootstrap: str) -> Iterator[None]:
    """The applications producing and consuming through ``bootstrap`` meanwhile; then their producers
    stop, and their consumers read everything acknowledged, before all of them end."""
    try:
        for a in apps:
            a.start(bootstrap, rate=RATE, codecs=CODECS[a.library])
        wait_until("first records", apps, lambda a, s: len(s.acked) >= 100 and s.batches["manual"], 120)
        for a in apps:
            a.joined = a.seen().batches["manual"][0]["t"] - a.started
        yield
        for a in apps:
            a.signal("stop-producing")
        wait_until("the producers' last records", apps, lambda a, s: s.produced is not None, 150)
        wait_until(
            "the consumers' last records", apps,
            lambda a, s: all(set(s.acked) <= set(s.received(g)) for g in ("manual", "auto")), 90,
        )  # fmt: skip
    finally:
        for a in apps:
            a.stop()


def _approve(live: Live, saga: str, what: str) -> None:
    done = live.cli("sagas", "approve", saga, "--by", "user:operator", "--reason", what)
    assert done.returncode == 0, done.stdout + done.stderr


def _wait_switched(live: Live, saga: str, number: int, timeout_s: float = 120) -> None:
    """Until batch ``number`` switched (its switch is a saga of its own)."""
    deadline = time.monotonic() + timeout_s
    while True:
        shown = live.cli("sagas", "show", saga).stdout
        line = next((x for x in shown.splitlines() if x.strip().startswith(f"batch {number} ")), "")
        if " done" in line:
            return
        assert " failed" not in line, shown
        assert time.monotonic() < deadline, f"batch {number} never switched:\n{shown}"
        time.sleep(1)


def _ended(routing: RoutingStore, saga: str, timeout_s: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        runs = routing.ledger.saga_runs(saga)
        if runs and runs[0].result is not None:
            return runs[0].result
        assert time.monotonic() < deadline, f"{saga} did not end in {timeout_s:g}s"
        time.sleep(1)


def test_a_batch_rolled_back_mid_way_is_back_on_3_9_and_nothing_is_lost(
    legacy_live: Live, legacy_routing: RoutingStore, legacy_config: Config, tmp_path: Path
) -> None:
    """Two batches of one application each: the first moved, then, while the second waits for its
    approval, rolled back (switched back along its reverse link); the second moves. The first's
    application ends on 3.9, the second's on 4.x, each having lost and doubled nothing, and the retirement
    deletes only the second's topic."""
    live, config = legacy_live, legacy_config
    assert live.gateway is not None
    clusters = {c: config.clusters[c].bootstrap for c in ("primary", "standby")}
    libraries = ("confluent-kafka", "java")
    apps = [App(lib, "one gateway", unique("back"), unique("back-t"), tmp_path / lib) for lib in libraries]
    kafka.create_topics(clusters["primary"], [a.topic for a in apps], partitions=PARTITIONS)
    saga = evacuation_id("primary")
    with _running(apps, live.gateway.bootstrap):
        started = live.cli("evacuate", "primary", "--to", "standby", "--batch", "1", "--approve-batches",
                           "--order", "name")  # fmt: skip
        assert started.returncode == 0, started.stdout + started.stderr
        wait_for_approval(live, saga, timeout_s=180)
        _approve(live, saga, "batch 1")
        _wait_switched(live, saga, 1)
        wait_for_approval(live, saga, timeout_s=180)  # before batch 2
        rolled = live.cli("evacuation", "roll-back", "primary")
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        _wait_phase(live, saga, "paused")
        resumed = live.cli("evacuation", "resume", "primary")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        wait_for_approval(live, saga, timeout_s=180)  # before batch 2, asked again
        _approve(live, saga, "batch 2")
        _wait_switched(live, saga, 2)
        wait_for_approval(live, saga, timeout_s=180)  # before deleting batch 2's topic
    batch_of = {a.topic: n for n, a in enumerate(sorted(apps, key=lambda a: a.topic), start=1)}
    rows, problems = [], []
    for a in apps:
        final, other = ("primary", "standby") if batch_of[a.topic] == 1 else ("standby", "primary")
        row, found = judge(a, clusters[final], clusters[other])
        rows.append({**row, "ends on": final})
        problems += [f"{a.name}: {p}" for p in found]
    print("\n" + table(rows))
    assert not problems, "\n".join(problems)

    _approve(live, saga, "retirement")
    result = _ended(legacy_routing, saga)
    assert result["outcome"] == "rolled back", result["detail"]
    assert [b["outcome"] for b in result["batches"]] == ["rolled back", "switched"]
    second = next(a.topic for a in apps if batch_of[a.topic] == 2)
    assert result["retired"] == [second]
    first = next(a.topic for a in apps if batch_of[a.topic] == 1)
    assert kafka.partitions(clusters["primary"], lambda name: name == first)  # still there, its home


def _wait_phase(live: Live, saga: str, phase: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while phase not in (shown := live.cli("sagas", "list").stdout):
        assert time.monotonic() < deadline, f"{saga} never {phase}:\n{shown}"
        time.sleep(1)
