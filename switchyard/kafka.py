"""Small, blocking Kafka helpers over confluent-kafka for the CLI, the demo and the tests.

They fail loudly: a record that was not acknowledged, or that did not come back in time, is an error
naming the topic and the count, never a short list returned as if all were well.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec
from confluent_kafka.cimpl import NewTopic

from switchyard.errors import KafkaOperationError, NoSuchTopic, UnknownPartition

ClientSettings = Mapping[str, Any]
READ_WAIT_MS = 10
"""How long a fetch of the readers here may wait at the broker: they read what is there and stop, and
some brokers hold a fetch its whole wait even with data at hand (docs/testbed.md)."""


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    partition: int = -1
    offset: int = -1
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int = 0
    """Milliseconds since the epoch, as the broker returned it (0: let the producer stamp it)."""


def create_topics(
    bootstrap: str,
    names: Iterable[str],
    *,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 15.0,
) -> None:
    """Create the topics, replicated as the cluster's ``default.replication.factor`` says; one that
    already exists is left as it is. Returns once the brokers' metadata gives every partition a leader:
    CreateTopics is answered when the controller has the topic, and a broker that has not yet applied it
    answers a ListOffsets or a Fetch with an unknown partition for a moment after."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = list(names)
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, config=dict(config or {})) for name in wanted],
        request_timeout=timeout_s,
    )
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise KafkaOperationError(f"{bootstrap}: cannot create topic {name!r}: {exc}") from exc
    _await_leaders(admin, bootstrap, wanted, time.monotonic() + timeout_s)


def _await_leaders(admin: AdminClient, bootstrap: str, names: list[str], deadline: float) -> None:
    for name in names:
        while True:
            meta = admin.list_topics(name, timeout=max(0.1, deadline - time.monotonic())).topics.get(name)
            if (
                meta is not None
                and meta.error is None
                and meta.partitions
                and all(p.error is None and p.leader >= 0 for p in meta.partitions.values())
            ):
                break
            if time.monotonic() > deadline:
                raise KafkaOperationError(f"{bootstrap}: topic {name!r} created but not led in time")
            time.sleep(0.05)


def delete_topic(bootstrap: str, name: str, *, timeout_s: float = 30.0) -> bool:
    """Delete the topic; False when it was gone already."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.delete_topics([name], operation_timeout=timeout_s, request_timeout=timeout_s)[name]
    try:
        future.result(timeout=timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return False
        raise KafkaOperationError(f"{bootstrap}: cannot delete topic {name!r}: {exc}") from exc
    return True


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Record],
    *,
    settings: ClientSettings | None = None,
    timeout_s: float = 30.0,
) -> int:
    """Produce and wait for every acknowledgement; return how many were acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **(settings or {})})
    failures: list[str] = []
    acked = 0

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        nonlocal acked
        if err is None:
            acked += 1
        else:
            failures.append(str(err))

    sent = 0
    for record in records:
        kwargs: dict[str, Any] = {"key": record.key, "value": record.value, "on_delivery": on_delivery}
        if record.partition >= 0:
            kwargs["partition"] = record.partition
        if record.headers:
            kwargs["headers"] = list(record.headers)
        if record.timestamp:
            kwargs["timestamp"] = record.timestamp
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        sent += 1
        producer.poll(0)
    remaining = producer.flush(timeout_s)
    if failures or remaining:
        raise KafkaOperationError(
            f"{bootstrap}: {topic}: {acked} of {sent} records acknowledged"
            + (f"; first error: {failures[0]}" if failures else f"; {remaining} still in flight")
        )
    return acked


def consume(
    bootstrap: str,
    topic: str,
    *,
    group: str,
    count: int,
    settings: ClientSettings | None = None,
    timeout_s: float = 60.0,
) -> list[Record]:
    """Join ``group``, read ``count`` records from the earliest offset, commit, and leave."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **(settings or {}),
        }
    )
    records: list[Record] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while len(records) < count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=min(500, count - len(records)), timeout=0.5):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaOperationError(f"{bootstrap}: {topic}: consume failed: {error}")
                records.append(_record(msg))
        if records:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    if len(records) < count:
        raise KafkaOperationError(
            f"{bootstrap}: {topic}: got {len(records)} of {count} records in {timeout_s:.0f}s"
        )
    return records


def _record(msg: Message) -> Record:
    headers = msg.headers() or []
    pairs = headers.items() if isinstance(headers, dict) else headers
    return Record(
        key=_as_bytes(msg.key()),
        value=_as_bytes(msg.value()),
        partition=msg.partition() or 0,
        offset=msg.offset() or 0,
        headers=tuple((name, _as_bytes(value) or b"") for name, value in pairs),
        timestamp=msg.timestamp()[1],
    )


def _as_bytes(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


def read_partitions(bootstrap: str, topic: str, *, timeout_s: float = 60.0) -> dict[int, list[Record]]:
    """Every record of ``topic``, per partition, read to the end without a consumer group.

    The end is where ListOffsets puts it, asked first; end-of-partition alone is not enough. A leader
    elected a moment ago reports in its Fetch answers the high watermark it knew as a follower, which
    can lag behind records the leader before it acknowledged (ListOffsets answers OFFSET_NOT_AVAILABLE
    until that is over, KIP-207): read to such an end, two acknowledged records were missed once.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "switchyard-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": READ_WAIT_MS,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise NoSuchTopic(f"{bootstrap}: {topic}: no such topic")
        partitions = sorted(metadata.partitions)
        deadline = time.monotonic() + timeout_s
        listed = watermarks(consumer, [(topic, p) for p in partitions], timeout_s=timeout_s)
        ends = {p: high for (_, p), (_, high) in listed.items()}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        found: dict[int, list[Record]] = {p: [] for p in partitions}
        open_partitions = set(partitions)
        while open_partitions:
            if time.monotonic() > deadline:
                raise KafkaOperationError(
                    f"{bootstrap}: {topic}: partitions {sorted(open_partitions)} not read to the end"
                )
            for msg in _next_messages(consumer):
                error = msg.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    if (msg.offset() or 0) >= ends[msg.partition() or 0]:
                        open_partitions.discard(msg.partition())
                elif error is not None:
                    raise KafkaOperationError(f"{bootstrap}: {topic}: read failed: {error}")
                else:
                    found[msg.partition() or 0].append(_record(msg))
        return found
    finally:
        consumer.close()


def partitions(bootstrap: str, accept: Callable[[str], bool]) -> list[tuple[str, int]]:
    """Every partition, sorted, of the topics on ``bootstrap`` whose names ``accept`` takes."""
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    return sorted((name, p) for name, meta in topics.items() if accept(name) for p in meta.partitions)


def ends_of(bootstrap: str, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Each partition's exact log end (see :func:`log_ends`), on a consumer of its own."""
    with _probe(bootstrap) as consumer:
        return log_ends(consumer, keys)


def starts_of(bootstrap: str, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Each partition's log start; those the cluster has not (its topic deleted) are left out."""
    wanted = set(keys)
    topics = {topic for topic, _ in wanted}
    there = wanted & set(partitions(bootstrap, lambda name: name in topics))
    with _probe(bootstrap) as consumer:
        return {k: low for k, (low, _) in watermarks(consumer, sorted(there), timeout_s=10).items()}


def bounds_of(
    bootstrap: str, keys: Iterable[tuple[str, int]]
) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """Each partition's log start and exact log end, on a consumer of its own."""
    wanted = list(keys)
    with _probe(bootstrap) as consumer:
        starts = {k: low for k, (low, _) in watermarks(consumer, wanted, timeout_s=10).items()}
        return starts, log_ends(consumer, wanted)


def open_transactions(
    admin: AdminClient, keys: Iterable[tuple[str, int]], *, timeout_s: float = 30.0
) -> dict[tuple[str, int], tuple[int, int]]:
    """The partitions with a transaction open, each with (last stable offset, high watermark): records
    from the first offset of the earliest open transaction on are invisible to a reader of committed
    records, such as the mirror, until it ends, whoever wrote them."""
    keys = list(keys)
    end = listed_ends(admin, keys, timeout_s=timeout_s)  # first: a write between the two hides nothing
    stable = listed_ends(admin, keys, committed=True, timeout_s=timeout_s)
    return {k: (stable[k], end[k]) for k in sorted(end) if stable[k] < end[k]}


def listed_ends(
    admin: AdminClient, keys: Iterable[tuple[str, int]], *, committed: bool = False, timeout_s: float = 30.0
) -> dict[tuple[str, int], int]:
    """Each partition's end as ListOffsets says it: the high watermark, or the last stable offset."""
    wanted = [TopicPartition(t, p) for t, p in dict.fromkeys(keys)]
    if not wanted:
        return {}
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    asked = admin.list_offsets(
        dict.fromkeys(wanted, latest), isolation_level=level, request_timeout=timeout_s
    )
    return {(tp.topic, tp.partition): future.result().offset for tp, future in asked.items()}


_EARLIEST, _LATEST = -2, -1
"""ListOffsets' own timestamps for a partition's first offset and its end."""


def watermarks(
    consumer: Consumer, keys: list[tuple[str, int]], *, timeout_s: float = 30.0
) -> dict[tuple[str, int], tuple[int, int]]:
    """Each partition's (log start, end as ListOffsets says it), asked in one request per broker for
    all of them: one request per partition costs a round trip each, ~30 ms apiece on a loaded broker,
    and a saga that fenced 1,000 partitions gave up on its step (tests/bench/test_estate_bench.py)."""
    if not keys:
        return {}
    found: dict[tuple[str, int], list[int]] = {k: [0, 0] for k in keys}
    deadline = time.monotonic() + timeout_s
    for spec, slot in ((_EARLIEST, 0), (_LATEST, 1)):
        for tp in _listed(consumer, [TopicPartition(t, p, spec) for t, p in keys], deadline):
            found[(tp.topic, tp.partition)][slot] = tp.offset
    return {k: (low, high) for k, (low, high) in found.items()}


RETRIABLE = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.OFFSET_NOT_AVAILABLE, KafkaError._TRANSPORT,
})  # fmt: skip
"""Answers that a moment cures: a partition whose leader moves (a broker restarted, a topic created a
moment ago and not yet known to every broker), or a broker briefly out of reach."""


_UNKNOWN = frozenset(
    {KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART}
)


_FIRST_TRY_S = 2.0
"""How long the first ListOffsets of a call is given before the partitions' leaders are asked anew and it
is sent again; each try after one timed out gets a second more (a slow leader answers in the end, a dead
one is found out by the metadata asked for between tries)."""
_UNANSWERED = frozenset({KafkaError._TIMED_OUT, KafkaError._TIMED_OUT_QUEUE})
"""A leader that did not answer in time: the request sent and waited on (``_TIMED_OUT``), or never sent,
waiting in the client's queue for a connection to a broker that is gone (``_TIMED_OUT_QUEUE``: a suite
run, the broker killed before the consumer had connected to it)."""
_RELISTED = RETRIABLE | _UNANSWERED | {KafkaError._DESTROY_BROKER}
"""What a ListOffsets is sent again after: besides a moment's errors, a leader that does not answer (a
broker killed: librdkafka waits on its connection until the time-out) or the client's handle of it
dropped (the cluster listed the broker no more: its partitions are led elsewhere now)."""
_LEADER_LOST = _UNANSWERED | {KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT}
"""The errors after which the leaders are asked for: librdkafka drops its cached leader itself on a
broker's answer that it leads no more, not where the leader does not answer."""


def _listed(consumer: Consumer, asked: list[TopicPartition], deadline: float) -> list[TopicPartition]:
    """ListOffsets for every partition of ``asked``, asked again while the answer is one a moment cures.

    The tries are short (``_FIRST_TRY_S``), and after a leader that did not answer the topics' metadata
    is asked for before the next: with one broker of three SIGKILLed, a consumer sent its ListOffsets to
    it until its time-out, never learning the new leader (30 s), or failed ``_DESTROY_BROKER`` when the
    cluster dropped the broker; asked so (tries of 1 s), it had the ends 0.3 s after the partitions were
    led elsewhere, ~10 s after the kill."""
    try_s = _FIRST_TRY_S
    while True:
        try:
            wait_s = max(0.1, min(try_s, deadline - time.monotonic()))
            answered = consumer.offsets_for_times(asked, timeout=wait_s)
            failed = next((tp for tp in answered if tp.error is not None), None)
            error = None if failed is None else failed.error
        except KafkaException as exc:
            answered, failed, error = [], None, exc.args[0]
        if error is None:
            return list(answered)
        if error.code() not in _RELISTED or time.monotonic() > deadline:  # _UNKNOWN is not relisted
            where = f" of {failed.topic}[{failed.partition}]" if failed is not None else ""
            raised = UnknownPartition if error.code() in _UNKNOWN else KafkaOperationError
            raise raised(f"cannot list the offsets{where}: {error}")
        if error.code() in _LEADER_LOST:
            _leaders_anew(consumer, {tp.topic for tp in asked}, deadline)
        if error.code() in _UNANSWERED:
            try_s += 1.0
        time.sleep(0.1)


def _leaders_anew(consumer: Consumer, topics: set[str], deadline: float) -> None:
    """The topics' metadata asked for now: librdkafka puts what it says in the cache ``offsets_for_times``
    finds leaders in (a consumer that only lists offsets asks for it no other way)."""
    for topic in sorted(topics):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            consumer.list_topics(topic, timeout=min(_FIRST_TRY_S, left))
        except KafkaException:
            return  # no broker answered in time: the next try says what is wrong


@contextmanager
def _probe(bootstrap: str) -> Iterator[Consumer]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "switchyard-bounds",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": READ_WAIT_MS,
        }
    )
    try:
        yield consumer
    finally:
        consumer.close()


def data_between(
    bootstrap: str, moved: dict[tuple[str, int], tuple[int, int]], *, timeout_s: float = 10.0
) -> int:
    """How many records clients wrote (committed, aborted or open) between each partition's two offsets:
    0 when only transaction markers lie there. None of them read: a record found ends the look at its
    partition. A partition not read to its second offset in time counts as written."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "switchyard-bounds",
                         "isolation.level": "read_uncommitted", "enable.partition.eof": True,
                         "fetch.wait.max.ms": READ_WAIT_MS})  # fmt: skip
    try:
        consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in moved.items()])
        waiting, found = dict(moved), 0
        deadline = time.monotonic() + timeout_s
        while waiting and time.monotonic() < deadline:
            for msg in _next_messages(consumer):
                key, error = (msg.topic() or "", msg.partition() or 0), msg.error()
                if key not in waiting or (error is not None and error.code() != KafkaError._PARTITION_EOF):
                    continue
                if error is None and (msg.offset() or 0) < waiting[key][1]:
                    found += 1
                if error is None or (msg.offset() or 0) >= waiting[key][1]:
                    del waiting[key]
        return found + len(waiting)
    finally:
        consumer.close()


LOG_ENDS_WAIT_S = 30.0
"""How long :func:`log_ends` waits for every partition's end by default."""


def log_ends(
    consumer: Consumer, partitions: Iterable[tuple[str, int]], *, timeout_s: float = LOG_ENDS_WAIT_S
) -> dict[tuple[str, int], int]:
    """The log end (high watermark) of each partition, read from a Fetch answer.

    Reading on from just below ListOffsets(latest) to end-of-partition gives the end the consumer's own
    Fetch answers report, at the cost of at most one batch (a broker that answered ListOffsets below
    its end was met once). A partition written to all the while may never show its end (each Fetch
    brings records): then the high watermark of the Fetch that brought a record is its end at that
    moment, as exact. The reading goes ``_ENDS_AT_ONCE`` partitions at a time: with 1,000 in one
    assignment, a few took seconds to report their end while the rest took a fraction of one (0.24 s
    in chunks of 250 against 1.8-5.3 s at once, with a mirror fetching the same partitions), and a saga
    fencing 1,000 partitions gave up on its step. ``consumer`` must have ``enable.partition.eof`` set;
    its assignment is replaced.
    """
    wanted = list(dict.fromkeys(partitions))
    marks = watermarks(consumer, wanted, timeout_s=timeout_s)
    deadline = time.monotonic() + timeout_s
    ends: dict[tuple[str, int], int] = {}
    for at in range(0, len(wanted), _ENDS_AT_ONCE):
        ends |= _read_to_ends(consumer, wanted[at : at + _ENDS_AT_ONCE], marks, deadline)
    return ends


_ENDS_AT_ONCE = 250


def _read_to_ends(
    consumer: Consumer,
    wanted: list[tuple[str, int]],
    marks: dict[tuple[str, int], tuple[int, int]],
    deadline: float,
) -> dict[tuple[str, int], int]:
    consumer.assign([TopicPartition(t, p, max(marks[t, p][0], marks[t, p][1] - 1)) for t, p in wanted])
    ends: dict[tuple[str, int], int] = {}
    try:
        while len(ends) < len(wanted):
            if time.monotonic() > deadline:
                raise KafkaOperationError(
                    f"no end of partition reached for {_named(consumer, wanted, ends, marks)}"
                )
            for msg in _next_messages(consumer):
                error, key = msg.error(), (msg.topic() or "", msg.partition() or 0)
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    ends[key] = msg.offset() or 0
                elif error is not None:
                    raise KafkaOperationError(f"reading to the log end failed: {error}")
                elif key not in ends:
                    _, fetched = consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
                    if fetched > (msg.offset() or 0):  # -1001 until a Fetch answer said it
                        ends[key] = fetched
    finally:
        consumer.unassign()
    return ends


def _named(
    consumer: Consumer,
    wanted: list[tuple[str, int]],
    ends: dict[tuple[str, int], int],
    marks: dict[tuple[str, int], tuple[int, int]],
) -> str:
    """The partitions without an end yet: what ListOffsets said of each, where the consumer is in it,
    and the high watermark its fetches last said."""
    missing = [TopicPartition(t, p) for t, p in wanted if (t, p) not in ends]
    at = {(tp.topic, tp.partition): tp.offset for tp in consumer.position(missing[:5])}
    named = []
    for tp in missing[:5]:
        key = (tp.topic, tp.partition)
        high = consumer.get_watermark_offsets(tp, cached=True)[1]
        named.append(
            f"{tp.topic}[{tp.partition}] (listed {marks[key]}, at {at.get(key)}, high watermark {high})"
        )
    return ", ".join(named) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")


def _next_messages(consumer: Consumer) -> list[Message]:
    """What has arrived, at once; when nothing has, wait a little for the first message only
    (``consume(n, t)`` would wait the whole ``t`` for ``n`` messages, even with the last one in hand)."""
    return consumer.consume(1000, 0) or consumer.consume(1, 0.05)
