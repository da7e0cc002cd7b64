"""An application through the gateway, watched whole: a producer and consumer groups in threads, and
everything they saw — each acknowledgement (and when), each failure, each batch received and whether its
commit went through — so a switch is judged by what the application saw, not by committed offsets.

The demo, the benchmarks and the tests run it; :func:`account` says what each consumer made of it.
"""

from __future__ import annotations

import itertools
import logging
import os
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from switchyard.threads import Worker

log = logging.getLogger(__name__)
_QUEUED_MAX = 2000
"""Records waiting in the producer at most: a blocked producer waits rather than piles records up."""


@dataclass
class Batch:
    """What the application got from one ``consume`` call, and whether committing it worked."""

    records: list[tuple[int, int, int]]
    """(partition, offset, value) in the order received."""
    commit_error: str | None = None
    at: float = field(default_factory=time.monotonic)
    """When the application received it."""


class Reader:
    """A consumer application in a group: every record it receives is processed, then the batch is
    committed synchronously (at-least-once, as most applications do). ``process_s``: how long it works
    on each batch before committing it (an application that is rarely idle); ``session_s``: its session
    time-out, if not the testbed's."""

    def __init__(
        self,
        bootstrap: str,
        app: str,
        topic: str,
        group: str,
        *,
        process_s: float = 0.0,
        session_s: float | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.app, self.topic, self.group = app, topic, group
        self.process_s = process_s
        self.stop = threading.Event()
        self.batches: list[Batch] = []
        self.errors: list[str] = []
        self.doing: tuple[str, float] = ("starting", time.time())
        """What the application is at, since when (wall clock): a stuck one says where it hangs."""
        debug = os.environ.get("SWITCHYARD_TRAFFIC_DEBUG")
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": f"{app}@consumer",
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **(settings or {}),
                **({"session.timeout.ms": int(session_s * 1000)} if session_s else {}),
                **({"debug": debug, "logger": debug_log(app)} if debug else {}),
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
                self.doing = ("consume", time.time())
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
                if self.process_s:
                    self.stop.wait(self.process_s)
                self.doing = ("commit", time.time())
                try:
                    self.consumer.commit(asynchronous=False)
                except KafkaException as exc:
                    batch.commit_error = exc.args[0].name()
        finally:
            self.doing = ("closing", time.time())
            self.consumer.close()
            self.doing = ("closed", time.time())


class Traffic:
    """A producer and consumer groups on one topic, in background threads.

    The producer is ``app`` and sends the numbers ``first``, ``first`` + 1, ... as values (``rate_per_s``
    paces it; by default it sends a record every few milliseconds). Each reader is an application of its own
    (``readers`` maps its AppID to its group), or by default ``app`` itself consuming in ``group``;
    ``process_s``, ``session_s``: as for :class:`Reader`; ``consumer_settings``: the readers' client settings
    beyond the application's own (default: the testbed's, see ``switchyard.stack``).
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
        rate_per_s: float | None = None,
        process_s: float = 0.0,
        session_s: float | None = None,
        consumer_settings: Mapping[str, Any] | None = None,
        first: int = 0,
    ) -> None:
        self.topic = topic
        self.first = first
        self.rate_per_s = rate_per_s
        self.stop_producing = threading.Event()
        self.sent = 0
        self.acked: list[int] = []
        self.acked_at: list[float] = []
        """When each acknowledgement arrived (``time.monotonic``), in step with ``acked``."""
        self.acked_where: list[tuple[int, int]] = []
        """(partition, offset) of each acknowledged record, in step with ``acked``."""
        self.failed: list[str] = []
        self.fatal: str | None = None
        """Why the producer failed for good (librdkafka's reason for a fatal error), if it did."""
        self.producer_name = f"{app}@producer"
        debug = os.environ.get("SWITCHYARD_TRAFFIC_DEBUG")
        # Idempotent (the Java client's default): the gateway carries its producer id and sequences
        # over to the new cluster. Not idempotent: one request in flight keeps order across retries.
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": self.producer_name,
                "acks": "all",
                "linger.ms": 2,
                "error_cb": self._error,
                **({"debug": debug, "logger": debug_log(self.producer_name)} if debug else {}),
                **(
                    {"enable.idempotence": True}
                    if idempotent
                    else {"enable.idempotence": False, "max.in.flight.requests.per.connection": 1}
                ),
            }
        )
        self.readers = [
            Reader(
                bootstrap, a, topic, g, process_s=process_s, session_s=session_s, settings=consumer_settings
            )
            for a, g in (readers or {app: group}).items()
        ]
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
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"traffic stalled: {len(self.acked)} acked, "
                    + ", ".join(f"{len(r.received)} received by {r.app}" for r in self.readers)
                    + (f"; the producer failed for good: {self.fatal}" if self.fatal else "")
                )
            time.sleep(0.1)

    def stop(self, timeout_s: float = 90, *, catch_up: bool = True) -> None:
        """Stop producing; once everything acknowledged was received (``catch_up``), stop consuming. The
        readers stop whatever happened to the producer; its failure is raised after."""
        self.stop_producing.set()
        try:
            self.threads[0].join(timeout_s)
            deadline = time.monotonic() + timeout_s
            for reader in self.readers if catch_up else []:
                while not set(self.acked) <= set(reader.received) and time.monotonic() < deadline:
                    time.sleep(0.2)
        finally:
            for reader in self.readers:
                reader.stop.set()
            for reader in self.readers:
                reader.thread.join(30)

    def longest_silence(self, since: float, until: float) -> tuple[float, float]:
        """The longest time between two acknowledgements within [since, until] (from ``since`` to the
        first, and from the last to ``until``, count too): what a producer saw as a pause. Returns
        (seconds, when it began)."""
        times = [t for t in self.acked_at if since <= t <= until]
        edges = [since, *sorted(times), until]
        gap, began = max(((b - a, a) for a, b in itertools.pairwise(edges)), default=(0.0, since))
        return gap, began

    def handover(self, ends: dict[int, int]) -> tuple[float, float]:
        """When the last record below ``ends`` (a partition's end on the old cluster when the switch
        fenced it) and the first at or above it were acknowledged: the last on the old cluster and the
        first on the new one (offsets are the same on both)."""
        on_old = [t for t, (p, o) in zip(self.acked_at, self.acked_where, strict=False) if o < ends[p]]
        on_new = [t for t, (p, o) in zip(self.acked_at, self.acked_where, strict=False) if o >= ends[p]]
        return max(on_old), min(on_new)

    def _error(self, error: KafkaError) -> None:
        """librdkafka's error callback: with it set, librdkafka logs no error itself."""
        if error.fatal():
            self.fatal = error.str()
        log.warning("%s: %s", self.producer_name, error.str())

    def _produce(self) -> None:
        def delivered(err: object, msg: object) -> None:
            if err is None:
                self.acked_at.append(time.monotonic())
                self.acked_where.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]
                self.acked.append(int(msg.value()))  # type: ignore[attr-defined]
            else:
                self.failed.append(str(err))

        interval = 1 / self.rate_per_s if self.rate_per_s else 0.0
        next_at = time.monotonic()
        while not self.stop_producing.is_set():
            if len(self.producer) >= _QUEUED_MAX:
                self.producer.poll(0.05)
                continue
            if interval:  # paced by sleeping, so the client leaves the CPU to the gateway and brokers
                wait = next_at - time.monotonic()
                if wait > 0:
                    self.producer.poll(0)
                    time.sleep(min(wait, 0.005))
                    continue
                next_at = max(next_at + interval, time.monotonic() - 1.0)  # catch up a second at most
            value = str(self.first + self.sent).encode()
            try:
                self.producer.produce(self.topic, key=value, value=value, on_delivery=delivered)
            except KafkaException as exc:  # the reason is in the error callback, not in the exception
                self.producer.poll(0)  # which may not have been served yet
                raise RuntimeError(f"the producer failed for good: {self.fatal or exc}") from exc
            self.sent += 1
            self.producer.poll(0 if interval else 0.002)
        if self.producer.flush(60) != 0:
            raise TimeoutError("records never acknowledged")


@dataclass
class Account:
    """What one consumer application made of the records acknowledged to the producer."""

    app: str
    processed: int
    """Distinct records it processed."""
    missing: list[int] = field(default_factory=list)
    """Acknowledged, never processed: lost to the application."""
    twice: set[int] = field(default_factory=set)
    """Processed more than once."""
    uncommitted: set[int] = field(default_factory=set)
    """Processed in a batch whose commit was refused: at-least-once allows processing them again."""
    commits_refused: Counter[str] = field(default_factory=Counter)
    out_of_order: str | None = None
    """The first record that stepped over one not yet seen, if any."""
    errors: list[str] = field(default_factory=list)
    again_after_commit: set[int] = field(default_factory=set)
    """Processed again after the commit of a batch holding them had gone through: a switch that moved
    offsets wrong (however their second delivery's own commit went)."""


def account(reader: Reader, acked: list[int], *, markers: bool = False) -> Account:
    """What ``reader`` received of ``acked``; ``markers``: transactions were written to the topic, so a
    step over offsets is a step over their markers (what was not received is counted as missing)."""
    received = Counter(reader.received)
    refused = [b for b in reader.batches if b.commit_error is not None]
    return Account(
        again_after_commit=again_after_commit(reader.batches),
        app=reader.app,
        processed=len(received),
        missing=sorted(set(acked) - set(received)),
        twice={value for value, times in received.items() if times > 1},
        uncommitted={value for batch in refused for _, _, value in batch.records},
        commits_refused=Counter(str(b.commit_error) for b in refused),
        out_of_order=first_out_of_order(reader.batches, markers=markers),
        errors=list(reader.errors),
    )


def again_after_commit(batches: list[Batch]) -> set[int]:
    """Records received again after a batch holding them was committed: a synchronous commit right after a
    batch covers its records. (A later commit may cover an earlier refused batch too — or not, when a
    rebalance rewound the consumer in between — so only a record's own batch is taken as proof.)"""
    committed: set[int] = set()
    again: set[int] = set()
    for batch in batches:
        values = [value for _, _, value in batch.records]
        again.update(v for v in values if v in committed)
        if batch.commit_error is None:
            committed.update(values)
    return again


def first_out_of_order(batches: list[Batch], *, markers: bool = False) -> str | None:
    """Per partition, records arrive in offset order: after the first (where the group began), each the
    next one, or a step back to one already seen (the group resuming at its last commit) — never a step
    over a record not yet seen. ``markers``: offsets may hold transaction markers, which a reader steps
    over, so a step forward may pass offsets (a record it passed is missing from what it received), and
    only a step back to an offset it never read is out of order."""
    last: dict[int, int] = {}
    highest: dict[int, int] = defaultdict(lambda: -1)
    seen: dict[int, set[int]] = defaultdict(set)
    for batch in batches:
        for partition, offset, _ in batch.records:
            if partition not in last:
                ordered = True  # where the group began
            elif markers:
                ordered = offset > highest[partition] or offset in seen[partition]
            else:
                ordered = offset == last[partition] + 1 or offset <= highest[partition]
            if not ordered:
                return (
                    f"partition {partition}: {offset} after {last[partition]} (highest {highest[partition]})"
                )
            last[partition], highest[partition] = offset, max(highest[partition], offset)
            if markers:
                seen[partition].add(offset)
    return None


def debug_log(app: str, directory: Path | None = None) -> logging.Logger:
    """librdkafka's debug log of one application, to a file of its own (SWITCHYARD_TRAFFIC_DEBUG), in
    ``directory`` (the temporary directory when none)."""
    logger = logging.getLogger(f"switchyard.traffic.{app}")
    handler = logging.FileHandler((directory or Path(tempfile.gettempdir())) / f"traffic-{app}.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger
