"""A soak: applications of two client libraries producing and consuming through the gateway for a
bounded stretch (``SWITCHYARD_SOAK_S``: 20 minutes with ``make soak``, 4 in ``make bench``), a switchover
or switchback saga every ``SWITCHYARD_SOAK_EVERY_S`` (60 s), and a worker, a gateway, a mirror and the
broker of the cluster the applications are on restarted between the first switches. 5,000 records/s in
all (``RATES``).

Judged at the end by what the applications saw and what the processes kept: every send reported once and
acknowledged, every acknowledged record on the final cluster exactly once, none processed twice by the
committing groups; every saga switched; no file descriptor, thread or ZooKeeper watch leaked (counted
just before each switch, when nothing else moves: the last against the first in the second half of the
process's life and from its third switch on, its first two, one each way, having opened its clients for
both clusters); the memory of every
process that lived through most of the soak flat (its growth over the second half of its life, by a
least-squares fit of its RSS sampled every 5 s, under 10 % or 24 MiB).
The figures are printed, written as JSON, and plotted to a PNG beside it (``SWITCHYARD_SOAK_DIR``,
default ``.state/soak``), which the test reads back.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException

from switchyard import kafka
from switchyard.config import Config
from switchyard.errors import KafkaOperationError
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import saga_id
from switchyard.stack import Stack
from tests.helpers.compat import CODECS, ROOT, App, judge, longest_gap, prepare, table, wait_until
from tests.helpers.live import Live, unique
from tests.helpers.processes import SupervisedProcess
from tests.helpers.soak import Instance, Sampler
from tests.helpers.soak_plot import plot

SOAK_S = float(os.environ.get("SWITCHYARD_SOAK_S", "240"))
EVERY_S = float(os.environ.get("SWITCHYARD_SOAK_EVERY_S", "60"))
OUT = Path(os.environ.get("SWITCHYARD_SOAK_DIR", ROOT / ".state" / "soak"))
LIBRARIES = ("confluent-kafka", "kafka-python")
RATES = {"confluent-kafka": 3500, "kafka-python": 1500}
"""Records per second per application, 5,000 in all. kafka-python's producer and its two consumers share
one Python process: at 2,500/s its network thread fell behind (tasks of 0.1-0.5 s) and its consumers with
it, on this two-core machine beside everything else; librdkafka does the work of its records in C."""
PARTITIONS = 6
BASELINE_GIVE_UP_S = 60
RESTARTS = ("worker", "gateway", "mirror", "broker")
"""Restarted half way between switches 1-2, 2-3, 3-4 and 4-5; the broker is the only one of the cluster
the applications are on, stopped gracefully, as a rolling restart does."""
FDS_MORE, THREADS_MORE, WATCHES_MORE = 8, 3, 8
"""What a process may hold more of at the last switch than at its first, before it counts as a leak:
connections to brokers and ZooKeeper come and go with the traffic."""
RSS_GROWTH = (0.10, 24.0)
"""The memory a process may gain over the second half of its life: this share of it, or these MiB."""

pytestmark = pytest.mark.timeout(SOAK_S + 900)


@dataclass
class Switch:
    number: int
    kind: str
    at: float
    """Seconds since the soak began."""
    held_s: float
    """Clients held, by the saga's account."""
    rto_s: float
    sends_held_s: float
    """The longest any application went without an acknowledgement around it."""
    broker_read_s: float | None
    """The baseline, just before: a new consumer reading the log ends of the applications' topics
    straight from the cluster the switch leaves, as the saga's steps read them; None if it gave up."""


def test_soak(live: Live, routing: RoutingStore, stack: Stack, stack_config: Config, tmp_path: Path) -> None:
    assert live.gateway is not None
    apps = [App(lib, "one gateway", unique("soak"), unique("soak-t"), tmp_path / lib) for lib in LIBRARIES]
    link = prepare(routing, stack_config, apps, partitions=PARTITIONS)
    brokers = {
        f"broker {s.name.removeprefix('kafka-')}": s for s in stack.services if s.name.startswith("kafka-")
    }
    sampler = Sampler(
        {"gateway": lambda: pid(live.gateway), "mirror": lambda: pid(live.mirror),
         "worker": lambda: pid(live.workers[-1])},
        stack_config.zookeeper.connect,
        watched={
            **{a.library: (lambda a=a: pid(a)) for a in apps},  # type: ignore[misc]
            **{name: (lambda s=s: stack.process(s).pid()) for name, s in brokers.items()},  # type: ignore[misc]
        },
    )  # fmt: skip
    try:
        for a in apps:
            # the libraries' own session time-outs: a switch that holds clients seconds at this rate
            # outlasted the tests' 6 s, and the groups fell apart at every one
            a.start(live.gateway.bootstrap, rate=RATES[a.library], codecs=CODECS[a.library][:2])
        wait_until("first records", apps, lambda a, s: len(s.acked) >= 100 and s.batches["manual"], 120)
        sampler.start()
        switches, restarts, outages = drive(live, stack, routing, apps, link, sampler)
        for a in apps:
            a.signal("stop-producing")
        wait_until("the producers' last records", apps, lambda a, s: s.produced is not None, 150)
        wait_until("the consumers' last records", apps, caught_up, 120)
    finally:
        sampler.stop()
        for a in apps:
            a.stop()

    clusters = [stack_config.clusters[c].bootstrap for c in ("primary", "standby")]
    final, other = (clusters[1], clusters[0]) if len(switches) % 2 else (clusters[0], clusters[1])
    rows, problems = [], []
    for a in apps:
        row, found = judge(a, final, other, outages)
        rows.append(row)
        problems += [f"{a.name}: {p}" for p in found]
    processes = [process_row(i) for i in sampler.instances]
    problems += leaks(sampler)
    figures = summary(switches, processes, rows, sampler, restarts)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"soak-{stamp}.json").write_text(json.dumps(figures, indent=2))
    picture = OUT / f"soak-{stamp}.png"
    plot(picture, sampler, [asdict(s) for s in switches], restarts)
    print(f"\n\nsoak: {sampler.now() / 60:.1f} min, {len(switches)} switches, restarts: "
          f"{', '.join(f'{what} at {t / 60:.1f} min' for t, what in restarts)}")  # fmt: skip
    print(table(rows))
    print("\n" + table([{k: v for k, v in asdict(s).items()} for s in switches]))
    print("\n" + table(processes))
    print(f"\nZooKeeper watches: {sampler.watches[0][1]} at the start, {sampler.watches[-1][1]} at the end")
    print(f"figures: {OUT / f'soak-{stamp}.json'}\nplot: {picture}")
    check_picture(picture)
    assert not problems, "\n".join(problems)


def drive(
    live: Live, stack: Stack, routing: RoutingStore, apps: list[App], link: str, sampler: Sampler
) -> tuple[list[Switch], list[tuple[float, str]], list[tuple[float, float]]]:
    """A switch every EVERY_S until SOAK_S has passed, RESTARTS half way between the first ones; the
    switches, when each process was restarted, and the outages the restarts made."""
    keys = [a.app for a in apps]
    switches: list[Switch] = []
    restarts: list[tuple[float, str]] = []
    outages: list[tuple[float, float]] = []
    """Wall-clock spans from each restart to traffic flowing again."""
    number = 0
    while sampler.now() < SOAK_S or not switches:
        number += 1
        kind = "switchover" if number % 2 else "switchback"
        sampler.sample(quiet=True)
        switches.append(switch(live, routing, apps, keys, link, number, kind, sampler))
        done = switches[-1]
        print(f"\n{sampler.now() / 60:5.1f} min: {kind} {number} switched, clients held {done.held_s:.2f} s, "
              f"sends held {done.sends_held_s:.2f} s, the broker's read {seconds(done.broker_read_s)}",
              end="", flush=True)  # fmt: skip  # a long run shows its progress
        link = routing.ledger.saga_runs(saga_id(keys))[0].result["reverse_link"]  # type: ignore[index]
        next_at = switches[0].at + number * EVERY_S
        if number <= len(RESTARTS):
            wait_till(sampler, next_at - EVERY_S / 2)
            restarts.append((sampler.now(), RESTARTS[number - 1]))
            began = time.time()
            restart(live, stack, RESTARTS[number - 1], on="standby" if number % 2 else "primary")
            print(f"\n{sampler.now() / 60:5.1f} min: {RESTARTS[number - 1]} restarted", end="", flush=True)
            flowing(apps, f"traffic after the {RESTARTS[number - 1]} restart")
            outages.append((began, time.time()))
        wait_till(sampler, next_at)
    sampler.sample(quiet=True)
    return switches, restarts, outages


def seconds(value: float | None) -> str:
    return "gave up" if value is None else f"{value:.2f} s"


def caught_up(_: App, s: Any) -> bool:
    return all(set(s.acked) <= set(s.received(g)) for g in ("manual", "auto"))


def pid(process: Any) -> int | None:
    """The process that does the work (a supervised command's child: the mirror, the worker)."""
    if isinstance(process, SupervisedProcess):
        return process.supervised_pid()
    popen = getattr(process, "process", None)
    return popen.pid if popen is not None and popen.poll() is None else None


def switch(
    live: Live, routing: RoutingStore, apps: list[App], keys: list[str], link: str, number: int, kind: str,
    sampler: Sampler,
) -> Switch:  # fmt: skip
    leaving = live.config.clusters["primary" if kind == "switchover" else "standby"].bootstrap
    baseline = broker_read_s(leaving, [(a.topic, p) for a in apps for p in range(PARTITIONS)])
    began, wall = sampler.now(), time.time()
    run = live.cli(kind, *keys, "--link", link, "--wait", "--reason", "soak")
    assert run.returncode == 0, run.stdout + run.stderr
    result = routing.ledger.saga_runs(saga_id(keys))[0].result
    assert result is not None
    assert result["outcome"] == "switched", result
    ended = time.time()
    flowing(apps, f"traffic after {kind} {number}")
    held = max(longest_gap(list(a.seen().acked.values()), wall, ended) for a in apps)
    return Switch(
        number, kind, round(began, 1), result["pause_ms"] / 1000, result["rto_ms"] / 1000, held, baseline
    )


def broker_read_s(bootstrap: str, partitions: list[tuple[str, int]]) -> float | None:
    """Seconds a new consumer takes to read these partitions' log ends from the broker, None if it
    gave up (each of its two stages may take ``BASELINE_GIVE_UP_S``): a measurement of the broker, not a
    judgement of the soak."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("soak-baseline"),
                         "enable.partition.eof": True, "fetch.wait.max.ms": kafka.READ_WAIT_MS})  # fmt: skip
    began = time.monotonic()
    try:
        kafka.log_ends(consumer, partitions, timeout_s=BASELINE_GIVE_UP_S)
        return round(time.monotonic() - began, 2)
    except (KafkaOperationError, KafkaException):  # its deadline passed, or the offsets' listing's
        return None
    finally:
        consumer.close()


def flowing(apps: list[App], what: str) -> None:
    """Until every application has had 2 s of records acknowledged and 2 s processed since now. Processed
    since, not caught up: at this rate a consumer reads about as fast as its application writes, and
    what it fell behind by at a switch it makes up only once the writing stops (judged then)."""
    before = {a.app: (len(s.acked), sum(s.received("manual").values())) for a in apps if (s := a.seen())}
    wait_until(what, apps,
               lambda a, s: len(s.acked) - before[a.app][0] >= 2 * RATES[a.library]
               and sum(s.received("manual").values()) - before[a.app][1] >= 2 * RATES[a.library],
               120)  # fmt: skip


def wait_till(sampler: Sampler, at: float) -> None:
    time.sleep(max(at - sampler.now(), 0))


def restart(live: Live, stack: Stack, what: str, *, on: str) -> None:
    """Stop one process gracefully (SIGTERM) and start it again, as a rolling restart does; a broker,
    that of cluster ``on``."""
    if what == "broker":
        (broker,) = (s for s in stack.services if s.name == f"kafka-{on}")
        stack.process(broker).stop()
        stack.up(timeout_s=120)  # starts what is not running, and waits until it answers
    elif what == "worker":
        live.workers[-1].stop()
        live.start_worker()
    else:
        process = live.gateway if what == "gateway" else live.mirror
        assert process is not None
        process.stop()
        process.start()


def process_row(instance: Instance) -> dict[str, Any]:
    quiet, cpu = instance.quiet, instance.cpu_percent()
    slope = instance.rss_slope_mib_per_h(after_s=instance.lived_s / 2)
    return {
        "process": instance.name,
        "pid": instance.pid,
        "lived min": round(instance.lived_s / 60, 1),
        "RSS MiB first/last": f"{instance.samples[0].rss_mib:.0f}/{instance.samples[-1].rss_mib:.0f}",
        "RSS slope 2nd half MiB/h": "-" if slope is None else f"{slope:+.1f}",
        "fds quiet first/last": f"{quiet[0].fds}/{quiet[-1].fds}" if quiet else "-",
        "threads quiet first/last": f"{quiet[0].threads}/{quiet[-1].threads}" if quiet else "-",
        "CPU % median/max": f"{statistics.median(cpu):.0f}/{max(cpu):.0f}" if cpu else "-",
    }


def leaks(sampler: Sampler) -> list[str]:
    """File descriptors, threads and ZooKeeper watches that grew over the second half of a process's life
    (from its first switch there to its last; a baseline taken earlier can fall while a broker is down,
    its connections gone: the gateway's did, 59 -> 103 at a level flat for 14 minutes) and at least its
    third switch (its first two, one each way, open the clients it keeps for both clusters); memory that
    grew through the second half of the life of a process that lived through most of the soak."""
    found = []
    for instance in (i for i in sampler.instances if i.judged):
        half = instance.samples[0].t + instance.lived_s / 2 if instance.samples else 0.0
        quiet = [s for s in instance.quiet[2:] if s.t >= half]
        if len(quiet) >= 2:
            first, last = quiet[0], quiet[-1]
            if last.fds > first.fds + FDS_MORE:
                found.append(f"{instance.name} {instance.pid}: open files {first.fds} -> {last.fds}")
            if last.threads > first.threads + THREADS_MORE:
                found.append(f"{instance.name} {instance.pid}: threads {first.threads} -> {last.threads}")
        if instance.lived_s >= sampler.now() / 2:
            half = [s for s in instance.samples if s.t >= instance.samples[0].t + instance.lived_s / 2]
            slope = instance.rss_slope_mib_per_h(after_s=instance.lived_s / 2)
            if slope is not None and half:
                grown = slope * (half[-1].t - half[0].t) / 3600
                allowed = max(RSS_GROWTH[0] * half[0].rss_mib, RSS_GROWTH[1])
                if grown > allowed:
                    found.append(
                        f"{instance.name} {instance.pid}: memory grew {grown:.0f} MiB over the second half "
                        f"of its life ({slope:+.0f} MiB/h; {allowed:.0f} allowed)"
                    )
    watches = [w for _, w in sampler.watches]
    if watches[-1] > watches[0] + WATCHES_MORE:
        found.append(f"ZooKeeper watches {watches[0]} -> {watches[-1]}")
    return found


def summary(
    switches: list[Switch], processes: list[dict[str, Any]], rows: list[dict[str, Any]], sampler: Sampler,
    restarts: list[tuple[float, str]],
) -> dict[str, Any]:  # fmt: skip
    held = [s.held_s for s in switches]
    return {
        "minutes": round(sampler.now() / 60, 1),
        "switches": [asdict(s) for s in switches],
        "held_s": {"p50": statistics.median(held), "max": max(held)},
        "restarts": [{"at": t, "process": what} for t, what in restarts],
        "applications": rows,
        "processes": processes,
        "zookeeper_watches": {"first": sampler.watches[0][1], "last": sampler.watches[-1][1]},
    }


def check_picture(path: Path) -> None:
    """The plot is a real picture: the size it was drawn at, and every panel drawn on."""
    import matplotlib.image

    pixels = matplotlib.image.imread(str(path))
    height, width = pixels.shape[:2]
    assert (width, height) == (1400, 1600), (width, height)
    for band in range(4):  # the four panels, top to bottom: something other than white in each
        panel = pixels[band * height // 4 : (band + 1) * height // 4, :, :3]
        assert (panel < 0.9).any(axis=2).mean() > 0.01, f"panel {band + 1} of {path} is empty"
