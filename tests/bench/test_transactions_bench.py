"""The pause a transactional producer sees at a switch, next to a plain producer's, in the same run.

One application writes through the gateway with two producers at once, each to a topic of its own: an
idempotent one at 1,000 records/s (the plain producer, read by a group) and a librdkafka transactional
one committing transactions of ten records back to back, aborting and writing again on an abortable
error. It is switched to the standby, back, and to the standby again, five times, each on a new app.
Per switch: the longest time without an acknowledgement while the saga ran (the plain producer) and
without a committed transaction (the transactional one: one abortable error at the block or after the
flip, an abort, a new producer id on the new cluster). Every committed transaction is read once on the
standby, none aborted; timings are only printed.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import threading
import time
import uuid
from collections import Counter

from confluent_kafka import KafkaException, Producer

from switchyard import kafka, launch
from switchyard.config import Config
from switchyard.routing.store import RoutingStore
from switchyard.sagas.requests import SwitchRequest
from switchyard.table import render
from switchyard.threads import Worker
from switchyard.traffic import Traffic
from tests.bench.test_switchover_bench import ACTOR, PARTITIONS, ROUND_TRIP, RUNS, switch
from tests.helpers.links import linked
from tests.helpers.live import Live

RATE = 1_000


class _Committer:
    """Transactions of ten records, committed back to back; when each commit returned."""

    def __init__(self, bootstrap: str, app: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": app,
                                  "transactional.id": f"{app}-txn"})  # fmt: skip
        self.topic = topic
        self.committed: list[tuple[int, float]] = []
        self.failed: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        self.producer.init_transactions(60)
        number = 0
        while not self.stop.is_set():
            try:
                self.producer.begin_transaction()
                for part in range(10):
                    self.producer.produce(self.topic, f"txn-{number}-{part}".encode(), partition=part % 3)
                self.producer.commit_transaction(60)
            except KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    self.failed.append(str(exc.args[0]))
                    return
                self.producer.abort_transaction(60)
                continue
            self.committed.append((number, time.monotonic()))
            number += 1

    def longest_gap(self, since: float, until: float) -> float:
        times = [since, *(t for _, t in self.committed if since <= t <= until), until]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


def test_the_pause_of_a_transactional_producer_next_to_a_plain_one(live: Live, routing: RoutingStore) -> None:
    assert live.gateway is not None
    config = live.effective
    rows: list[dict[str, float | str]] = []
    for _ in range(RUNS):
        app, topic, link = _prepare(routing, config)
        traffic = Traffic(live.gateway.bootstrap, app, topic, f"{app}-readers", idempotent=True,
                          rate_per_s=RATE)  # fmt: skip
        committer = _Committer(live.gateway.bootstrap, app, f"{topic}-txn")
        worker = Worker(committer.run, name="transactions")
        traffic.start()
        worker.start()
        try:
            traffic.wait_for(RATE)
            _committing(committer)  # its topic seen used through the gateway: the switch moves it too
            for number, kind in enumerate(ROUND_TRIP):
                request = SwitchRequest([app], link=link, actor=ACTOR, reason="bench",
                                        policy=launch.policy_of(config, kind))  # fmt: skip
                began = time.monotonic()
                result, _ = asyncio.run(switch(config, app, kind, request))
                traffic.wait_for(RATE)
                _committing(committer)
                ended = time.monotonic()
                assert result["outcome"] == "switched", result
                link = result["reverse_link"]
                rows.append({"switch": f"{number + 1} {kind.value}",
                             "plain": traffic.longest_silence(began, ended)[0],
                             "transactional": committer.longest_gap(began, ended)})  # fmt: skip
        finally:
            committer.stop.set()
            worker.join(90)
            traffic.stop()
        assert committer.failed == [], committer.failed
        assert traffic.failed == []
        _judged(config, f"{topic}-txn", {n for n, _ in committer.committed})
    _print(rows)


def _committing(committer: _Committer) -> None:
    """Until the committer has committed five more transactions (or failed)."""
    committed = len(committer.committed)
    while len(committer.committed) < committed + 5 and not committer.failed:
        time.sleep(0.01)


def _prepare(routing: RoutingStore, config: Config) -> tuple[str, str, str]:
    """An app, its plain producer's topic (the transactional one's is the same name with ``-txn``), and
    a link copying both."""
    app, topic = f"bench-{uuid.uuid4().hex[:6]}", f"bench-orders-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(config.clusters["primary"].bootstrap, [topic, f"{topic}-txn"], partitions=PARTITIONS)
    return app, topic, linked(routing, app, [app], [topic, f"{topic}-txn"], 2 * PARTITIONS)


def _judged(config: Config, topic: str, committed: set[int]) -> None:
    """Every committed transaction's records once on the standby, none of an aborted one."""
    read = Counter(
        r.value.decode()
        for records in kafka.read_partitions(config.clusters["standby"].bootstrap, topic).values()
        for r in records
        if r.value is not None
    )
    assert read == Counter(f"txn-{n}-{part}" for n in committed for part in range(10))


def _print(rows: list[dict[str, float | str]]) -> None:
    table: list[tuple[object, ...]] = [
        (r["switch"], f"{r['plain']:.2f}", f"{r['transactional']:.2f}") for r in rows
    ]
    for number, kind in enumerate(ROUND_TRIP):
        name = f"{number + 1} {kind.value}"
        switches = [r for r in rows if r["switch"] == name]
        for statistic, pick in (("p50", statistics.median), ("max", max)):
            figures = (f"{pick(float(r[k]) for r in switches):.2f}" for k in ("plain", "transactional"))
            table.append((f"{statistic} {name}", *figures))
    print(
        f"\n\nthe longest wait per switch, {RUNS} round trips (seconds): a plain producer at {RATE:,} "
        "records/s (no acknowledgement) beside a transactional one (no committed transaction)"
    )
    print(render(("SWITCH", "PLAIN PRODUCER", "TRANSACTIONAL PRODUCER"), table))
