"""Transactional producers for the tests: librdkafka's, committing numbered transactions through the
gateway, and what a ``read_committed`` reader sees of them after."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable

from confluent_kafka import KafkaException, Producer

from switchyard import kafka
from tests.helpers.live import unique


def read_exactly_once(bootstrap: str, topic: str, committed: set[int], *, records: int = 5) -> None:
    """A read_committed reader of the cluster at ``bootstrap`` (where the application ends) sees each
    committed transaction's ``records`` records once, and nothing else."""
    read = Counter(
        r.value.decode()
        for records in kafka.read_partitions(bootstrap, topic).values()
        for r in records
        if r.value is not None
    )
    expected = Counter(f"{n}-{part}" for n in committed for part in range(records))
    assert read == expected, (
        f"twice: {sorted(k for k, c in read.items() if c > 1)[:10]}; "
        f"missing: {sorted(set(expected) - set(read))[:10]}; "
        f"never committed: {sorted(set(read) - set(expected))[:10]}"
    )


class Transactions:
    """A transactional producer through the gateway, committing numbered transactions of ``records``
    records (values ``<n>-<part>``) over three partitions, back to back; on an abortable error it aborts
    and writes the same transaction again."""

    def __init__(self, bootstrap: str, app: str, topic: str, *, records: int = 5) -> None:
        self.topic, self.records = topic, records
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": app,
                                  "transactional.id": unique("txn")})  # fmt: skip
        self.committed: list[int] = []
        self.committed_at: list[float] = []
        """When each commit returned (``time.monotonic``), in step with ``committed``."""
        self.aborted = 0
        self.fatal: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        self.producer.init_transactions(60)
        number = 0
        while not self.stop.is_set():
            try:
                self.producer.begin_transaction()
                for part in range(self.records):
                    self.producer.produce(self.topic, f"{number}-{part}".encode(), partition=part % 3)
                retried(lambda: self.producer.commit_transaction(60))
            except KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    self.fatal.append(f"transaction {number}: {exc.args[0]}")
                    return
                if not self._aborted(f"transaction {number}, after {exc.args[0].name()}"):
                    return
                continue
            self.committed.append(number)
            self.committed_at.append(time.monotonic())
            number += 1

    def _aborted(self, what: str) -> bool:
        """Abort the transaction in progress (``what``); whether that worked (an error that stops the
        producer is recorded, as the application would have stopped on it)."""
        try:
            retried(lambda: self.producer.abort_transaction(60))
        except KafkaException as exc:
            self.fatal.append(f"the abort of {what}: {exc.args[0]}")
            return False
        self.aborted += 1
        return True

    def committed_count(self) -> int:
        """The transactions committed so far; a fatal error the producer stopped on fails the caller."""
        assert not self.fatal, self.fatal
        return len(self.committed)

    def longest_gap(self, since: float, until: float) -> float:
        """The longest time between ``since`` and ``until`` without a committed transaction."""
        times = [since, *(t for t in self.committed_at if since <= t <= until), until]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


def retried(call: Callable[[], None]) -> None:
    """A commit or abort again while it fails with a retriable error, as librdkafka asks."""
    while True:
        try:
            return call()
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise
