"""An application through the gateway, as a test watches it: a producer and a consumer group in
threads, and what they saw — every acknowledgement and failure, every batch received and whether its
commit went through — so a switch is judged by what the application saw, not by committed offsets.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer

from switchyard import kafka
from switchyard.stack import TESTBED_CONSUMER_SETTINGS
from tests.helpers.threads import Worker

EXPECTED_COMMIT_FAILURES = {
    "NOT_COORDINATOR",
    "UNKNOWN_MEMBER_ID",
    "ILLEGAL_GENERATION",
    "REBALANCE_IN_PROGRESS",
}
"""Why commits fail across a switch today (carrying them over is the gateway's next step)."""


@dataclass
class Batch:
    """What the application got from one ``consume`` call, and whether committing it worked."""

    records: list[tuple[int, int, int]]
    """(partition, offset, value) in the order received."""
    commit_error: str | None = None


class Reader:
    """A consumer application in a group: every record it receives is processed, then the batch is
    committed synchronously; each batch, its commit's outcome and every error the client reported kept."""

    def __init__(self, bootstrap: str, app: str, topic: str, group: str) -> None:
        self.app, self.topic, self.group = app, topic, group
        self.stop = threading.Event()
        self.batches: list[Batch] = []
        self.errors: list[str] = []
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": f"{app}@consumer",
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **TESTBED_CONSUMER_SETTINGS,
            }
        )
        self.thread = Worker(self._consume, name=f"consumer-{app}")

    @property
    def received(self) -> list[int]:
        return [value for batch in self.batches for _, _, value in batch.records]

    def _consume(self) -> None:
        self.consumer.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                messages = self.consumer.consume(200, 0.2)
                self.errors += [str(m.error()) for m in messages if m.error() is not None]
                records = [
                    (m.partition() or 0, m.offset() or 0, int(m.value() or b"-1"))
                    for m in messages
                    if m.error() is None
                ]
                if not records:
                    continue
                batch = Batch(records)
                self.batches.append(batch)  # processed: the application has seen them
                try:
                    self.consumer.commit(asynchronous=False)
                except KafkaException as exc:
                    batch.commit_error = exc.args[0].name()
        finally:
            self.consumer.close()


class Traffic:
    """A producer and consumer groups on one topic, through the gateway, in background threads.

    The producer is ``app``; each reader is an application of its own (``readers`` maps its AppID to
    its group), or by default ``app`` itself consuming in ``group``. Everything is kept, so the test
    judges the switch by what the applications saw.
    """

    def __init__(
        self,
        bootstrap: str,
        app: str,
        topic: str,
        group: str,
        *,
        idempotent: bool,
        readers: dict[str, str] | None = None,
    ) -> None:
        self.topic = topic
        self.stop_producing = threading.Event()
        self.sent = 0
        self.acked: list[int] = []
        self.failed: list[str] = []
        # Idempotent (the Java client's default): the gateway carries its producer id and sequences
        # over to the new cluster. Not idempotent: one request in flight keeps order across retries.
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": f"{app}@producer",
                "acks": "all",
                "linger.ms": 2,
                **(
                    {"enable.idempotence": True}
                    if idempotent
                    else {"enable.idempotence": False, "max.in.flight.requests.per.connection": 1}
                ),
            }
        )
        self.readers = [Reader(bootstrap, a, topic, g) for a, g in (readers or {app: group}).items()]
        self.threads = [Worker(self._produce, name="producer"), *(r.thread for r in self.readers)]

    @property
    def group(self) -> str:
        return self.readers[0].group

    @property
    def batches(self) -> list[Batch]:
        return self.readers[0].batches

    @property
    def received(self) -> list[int]:
        return self.readers[0].received

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def wait_for(self, count: int, timeout_s: float = 60) -> None:
        """Until ``count`` more records than now were acknowledged and received by every reader."""
        acked = len(self.acked)
        received = [len(r.received) for r in self.readers]
        deadline = time.monotonic() + timeout_s
        while len(self.acked) < acked + count or any(
            len(r.received) < n + count for r, n in zip(self.readers, received, strict=True)
        ):
            assert time.monotonic() < deadline, f"traffic stalled: {len(self.acked)} acked, " + ", ".join(
                f"{len(r.received)} received by {r.app}" for r in self.readers
            )
            time.sleep(0.1)

    def stop(self, timeout_s: float = 90) -> None:
        """Stop producing; once everything acknowledged was received, stop consuming."""
        self.stop_producing.set()
        self.threads[0].join(timeout_s)
        deadline = time.monotonic() + timeout_s
        for reader in self.readers:
            while not set(self.acked) <= set(reader.received) and time.monotonic() < deadline:
                time.sleep(0.2)
        for reader in self.readers:
            reader.stop.set()
        for reader in self.readers:
            reader.thread.join(30)

    def _produce(self) -> None:
        def delivered(err: object, msg: object) -> None:
            if err is None:
                self.acked.append(int(msg.value()))  # type: ignore[attr-defined]
            else:
                self.failed.append(str(err))

        while not self.stop_producing.is_set():
            if len(self.producer) >= 2000:  # blocked: wait rather than pile records up
                self.producer.poll(0.05)
                continue
            self.producer.produce(
                self.topic, key=str(self.sent).encode(), value=str(self.sent).encode(), on_delivery=delivered
            )
            self.sent += 1
            self.producer.poll(0.002)
        assert self.producer.flush(60) == 0, "records never acknowledged"


def topic_ids(bootstrap: str, topic: str) -> list[int]:
    """Every record value of the topic, read directly from one cluster."""
    return [int(r.value or b"-1") for rs in kafka.read_partitions(bootstrap, topic).values() for r in rs]


def assert_in_order(batches: list[Batch]) -> None:
    """Per partition, records arrive in offset order: each the next one, or a step back to one already
    seen (the group resuming at its last commit) — never a step over a record not yet seen."""
    last: dict[int, int] = defaultdict(lambda: -1)
    highest: dict[int, int] = defaultdict(lambda: -1)
    for batch in batches:
        for partition, offset, _ in batch.records:
            assert offset == last[partition] + 1 or offset <= highest[partition], (
                f"partition {partition}: {offset} after {last[partition]} (highest {highest[partition]})"
            )
            last[partition], highest[partition] = offset, max(highest[partition], offset)


def judge_consumer(traffic: Traffic) -> str:
    """What each application received is complete, in order, and only repeated where a commit failed."""
    return "; ".join(judge_reader(reader, traffic.acked) for reader in traffic.readers)


def judge_reader(reader: Reader, acked: list[int]) -> str:
    assert reader.errors == []
    received = Counter(reader.received)
    assert set(received) == set(acked), f"records {reader.app} never received"
    assert_in_order(reader.batches)
    failed = [b for b in reader.batches if b.commit_error is not None]
    uncommitted = {value for batch in failed for _, _, value in batch.records}
    twice = {value for value, times in received.items() if times > 1}
    assert twice <= uncommitted, "records processed again although their commit had succeeded: " + "; ".join(
        f"{value}: " + ", ".join(
            f"batch {i} ({b.commit_error or 'committed'})" for i, b in enumerate(reader.batches)
            if any(v == value for _, _, v in b.records)
        )
        for value in sorted(twice - uncommitted)[:5]
    )  # fmt: skip
    reasons = Counter(str(b.commit_error) for b in failed)
    assert set(reasons) <= EXPECTED_COMMIT_FAILURES, reasons
    refused = f"{len(failed)} commits refused {dict(reasons)}"
    return f"{reader.app}: {len(received)} records, {len(twice)} twice, {refused}"
