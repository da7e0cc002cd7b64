"""Shielding a frozen cluster (seed 004, part three): what one application's traffic to a healthy
cluster costs while another cluster is frozen (SIGSTOP of its broker: connections stay open, nothing
answers), first unshielded, then shielded — and how fast requests bound to the frozen one are refused.

One gateway; application ``steady`` produces to the primary at a fixed rate, timing every send to its
acknowledgement; application ``doomed`` is bound to the standby and produces there at a lower rate the
whole time (its client keeps retrying while the standby is frozen, as a real one would). Phases of equal
length, in one run: before (both clusters answer), frozen (the standby frozen, not shielded), shielded
(``switchyard clusters shield standby``). The figures are the steady application's p50, p99 and max
send latency per phase, the shielded phase's p99 as a ratio of the one before (target: within 10 %),
how long a raw Fetch bound to the shielded cluster waits for its refusal and with which error, and the
gateway's readiness meanwhile. The doomed application's sends are acknowledged once the standby is
back (its client retried them all along): nothing it sent is lost. Asserted every run: no steady send
failed and each application's every send was acknowledged, the refusals are retriable, readiness answers
200 while shielded; timings are only printed.
"""

from __future__ import annotations

import datetime
import os
import signal
import threading
import time
from typing import Any

from confluent_kafka import KafkaError, Producer
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchTopic

from switchyard import kafka
from switchyard.keys import BindingKey
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from switchyard.table import render
from tests.helpers import ports
from tests.helpers.live import Live, readiness, unique
from tests.helpers.processes import freeze
from tests.helpers.raw import RawClient
from tests.helpers.services import PrivateService, live_on_brokers, private_brokers  # noqa: F401 - fixtures
from workers.gateway.routing import apis

HEALTH_PORT = ports.reserve(1)[0]
LIVE_SETTINGS = {"SWITCHYARD__GATEWAY__HEALTH_PORT": str(HEALTH_PORT)}
RATE, DOOMED_RATE = 500, 100
PHASE_S = float(os.environ.get("SWITCHYARD_BENCH_PHASE_S", "20"))
PROBES = 50
RETRIABLE = {ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available}


class Timed:
    """A producer sending at a steady rate, timing each send to its acknowledgement (monotonic seconds:
    when sent, how long, and the error if it failed)."""

    def __init__(self, bootstrap: str, app: str, topic: str, rate_per_s: float) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": app})
        self.topic, self.every = topic, 1 / rate_per_s
        self.sends: list[tuple[float, float, str | None]] = []
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._send, daemon=True)

    def start(self) -> Timed:
        self.thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.producer.flush(60)

    def latencies(self, since: float, until: float) -> list[float]:
        return sorted(took for sent, took, error in self.sends if since <= sent < until and error is None)

    def failed(self, since: float, until: float) -> list[str]:
        return [error for sent, _, error in self.sends if since <= sent < until and error is not None]

    def _send(self) -> None:
        due, n = time.monotonic(), 0
        while not self.stop.is_set():
            sent = time.monotonic()

            def done(err: KafkaError | None, _msg: Any, sent: float = sent) -> None:
                self.sends.append((sent, time.monotonic() - sent, None if err is None else err.name()))

            self.producer.produce(self.topic, b"%d" % n, on_delivery=done)
            self.producer.poll(0)
            n = self.sent = n + 1
            due += self.every
            time.sleep(max(0.0, due - time.monotonic()))


def probe_refusals(port: int, app: str, topic: str) -> tuple[list[float], set[str]]:
    """Raw Fetches bound to the shielded cluster: how long each waited for its answer, and its errors."""
    client = RawClient(port, client_id=app, timeout_s=10)
    waits, errors = [], set()
    partition = FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    fields = {"replica_id": -1, "max_wait": datetime.timedelta(milliseconds=500), "min_bytes": 1,
              "max_bytes": 1 << 20, "session_epoch": -1, "forgotten_topics_data": (),
              "topics": (FetchTopic(topic=topic, partitions=(partition,)),)}  # fmt: skip
    try:
        for _ in range(PROBES):
            began = time.monotonic()
            answer = client.answer(client.send(apis.FETCH, 12, **fields))
            waits.append(time.monotonic() - began)
            errors |= {ErrorCode(p.error_code).name for t in answer.responses for p in t.partitions}
    finally:
        client.close()
    return sorted(waits), errors


def ms(values: list[float], q: float) -> float:
    return round(1000 * values[min(len(values) - 1, int(q * len(values)))], 1) if values else float("nan")


def report(
    phases: dict[str, tuple[float, float]], steady: Timed, doomed: Timed, waits: list[float],
    errors: set[str], ready: tuple[int, str],
) -> None:  # fmt: skip
    rows, p99 = [], {}
    for name, (since, until) in phases.items():
        took = steady.latencies(since, until)
        p99[name] = ms(took, 0.99)
        late = doomed.latencies(since, until)
        rows.append((name, len(took), len(steady.failed(since, until)), ms(took, 0.5), p99[name],
                     ms(took, 1.0), f"{len(late)}, p50 {ms(late, 0.5) / 1000:.1f}s"))  # fmt: skip
    print(f"\nshielding: {RATE} records/s to the healthy primary, {DOOMED_RATE}/s to the standby; "
          f"{PHASE_S:g}s per phase")  # fmt: skip
    headers = ("PHASE", "STEADY ACKED", "FAILED", "P50 MS", "P99 MS", "MAX MS", "DOOMED ACKED (LATER)")
    print(render(headers, rows))
    print(f"shielded p99 / before p99: {p99['shielded'] / p99['before']:.2f} (target <= 1.10); "
          f"frozen unshielded: {p99['frozen'] / p99['before']:.2f}")  # fmt: skip
    print(f"a Fetch bound to the shielded cluster: answered in p50 {ms(waits, 0.5)} ms, max "
          f"{ms(waits, 1.0)} ms ({PROBES} probes), {', '.join(sorted(errors))}; readiness {ready[0]} "
          f"({ready[1]})")  # fmt: skip


def test_a_shielded_frozen_cluster_costs_the_other_clusters_traffic_nothing(
    live: Live, routing: RoutingStore, brokers: tuple[PrivateService, PrivateService]
) -> None:
    assert live.gateway is not None
    primary, standby = brokers
    steady_app, doomed_app = unique("steady"), unique("doomed")
    healthy, frozen = unique("shield-ok"), unique("shield-frozen")
    kafka.create_topics(primary.connect, [healthy], partitions=3)
    kafka.create_topics(standby.connect, [frozen], partitions=3)
    epoch = routing.set_binding(BindingKey.for_app(doomed_app), "standby", actor="user:bench", reason="bench")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    steady = Timed(live.gateway.bootstrap, steady_app, healthy, RATE).start()
    doomed = Timed(live.gateway.bootstrap, doomed_app, frozen, DOOMED_RATE).start()
    phases: dict[str, tuple[float, float]] = {}
    pid = standby.process.pid()
    assert pid, "the standby broker is not running"
    try:
        time.sleep(5)  # connections made, metadata known, batches flowing
        began = time.monotonic()
        time.sleep(PHASE_S)
        phases["before"] = (began, time.monotonic())
        freeze(pid)
        began = time.monotonic()
        time.sleep(PHASE_S)
        phases["frozen"] = (began, time.monotonic())
        shield = live.cli("clusters", "shield", "standby", "--reason", "frozen")
        assert shield.returncode == 0, shield.stdout + shield.stderr
        time.sleep(2)  # the shield applied, the frozen connections closed
        began = time.monotonic()
        time.sleep(PHASE_S)
        phases["shielded"] = (began, time.monotonic())
        waits, errors = probe_refusals(live.gateway.port, doomed_app, frozen)  # outside the measured phase
        ready = readiness(HEALTH_PORT, "standby")
    finally:
        os.kill(pid, signal.SIGCONT)
        live.cli("clusters", "unshield", "standby")
        steady.finish()
        doomed.finish()

    report(phases, steady, doomed, waits, errors, ready)
    assert all(not steady.failed(*span) for span in phases.values())
    assert len(steady.sends) == steady.sent
    assert len(doomed.sends) == doomed.sent, "the frozen cluster's client lost sends"
    assert not [e for _, _, e in doomed.sends if e is not None]
    assert errors, "no partition error in the refusals"
    assert errors <= {e.name for e in RETRIABLE}, errors
    assert max(waits) < 0.5, "a refusal waited for the fetch's max wait: the frozen cluster was asked"
    assert ready == (200, "shielded")
