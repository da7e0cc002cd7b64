"""Where offset maps live: a compacted topic on the link's target cluster, one record per segment.

The map sits next to the data it describes, so whoever can read the target's copy (a consumer being
moved, the verification job, the reverse link) can translate offsets, even with ZooKeeper gone. Each
segment is its own key, so compaction never drops one; the newest record for a key wins. When a link is
promoted, each partition's final position — how far the source was copied, and the target's end then —
is stored the same way: the reverse link starts from it. A failover's also says where the offsets clients
see go on (``resume``), where that is past the copy: past everything clients may have read on the cluster
left behind (see :mod:`switchyard.mirror.presented`).
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from switchyard import kafka
from switchyard.errors import KafkaOperationError, NoSuchTopic
from switchyard.mirror.offsets import OffsetMap

MAP_TOPIC = "switchyard.offset-map"
MAP_TOPIC_CONFIG = {"cleanup.policy": "compact"}
TopicPartitionKey = tuple[str, int]


def ensure_map_topic(admin: AdminClient) -> None:
    """Create the map topic, compacted, where it is missing (before anything reads it: a broker
    with auto-creation on would otherwise create it on first read, uncompacted)."""
    if MAP_TOPIC in admin.list_topics(timeout=10).topics:
        return
    for future in admin.create_topics([NewTopic(MAP_TOPIC, 1, config=MAP_TOPIC_CONFIG)]).values():
        try:
            future.result(10)
        except Exception as exc:
            if "exist" not in str(exc).lower():
                raise KafkaOperationError(f"cannot create {MAP_TOPIC}: {exc}") from exc


def store_records(
    bootstrap: str, records: Iterable[tuple[bytes, bytes | None]], what: str, producer: Producer | None = None
) -> None:
    """Write map records (segments, final positions; None: a tombstone) and wait until every one is
    acknowledged. A long-lived process passes its own ``producer`` (to ``bootstrap``): a new idempotent
    one takes 0.5-1 s to start, and a switch stores final positions while clients are held."""
    if producer is None:
        ensure_map_topic(AdminClient({"bootstrap.servers": bootstrap}))
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failures: list[str] = []
    for key, value in records:
        producer.produce(
            MAP_TOPIC, value, key, on_delivery=lambda e, _m: failures.append(str(e)) if e else None
        )
    if producer.flush(30) or failures:
        raise KafkaOperationError(
            f"{bootstrap}: {what} not stored: {failures[:1] or 'not acknowledged in time'}"
        )


def segment_record(link_id: str, topic: str, partition: int, source: int, target: int) -> tuple[bytes, bytes]:
    """The key and value that store one segment."""
    key = json.dumps([link_id, topic, partition, source]).encode()
    value = json.dumps({"link": link_id, "topic": topic, "partition": partition, "source": source,
                        "target": target}).encode()  # fmt: skip
    return key, value


def end_record(  # noqa: PLR0917 - the fields of the record
    link_id: str, topic: str, partition: int, source: int, target: int, resume: int | None = None
) -> tuple[bytes, bytes]:
    """The key and value that store a partition's final position when its link is promoted; ``resume``
    only where it is past ``source``."""
    key = json.dumps([link_id, topic, partition, "end"]).encode()
    fields = {"link": link_id, "topic": topic, "partition": partition, "source": source, "target": target,
              "end": True}  # fmt: skip
    if resume is not None and resume > source:
        fields["resume"] = resume
    return key, json.dumps(fields).encode()


@dataclass(frozen=True)
class LinkRecords:
    maps: dict[TopicPartitionKey, OffsetMap]
    """Partitions without an entry have identical offsets."""
    ends: dict[TopicPartitionKey, tuple[int, int]]
    """Once promoted: (source position copied up to, target end then) per partition."""
    resumes: dict[TopicPartitionKey, int] = field(default_factory=dict)
    """Once promoted by a failover: the source position at which the target's records written since are
    presented, where it is past the copy (the rest: where the copy stood)."""


def read_link(bootstrap: str, link_id: str) -> LinkRecords:
    """The offset map and final positions of ``link_id``, stored on the cluster at ``bootstrap``."""
    return _records_of((json.loads(value) for value in _latest(bootstrap).values()), link_id)


def _records_of(stored: Iterable[dict[str, Any]], link_id: str) -> LinkRecords:
    segments: dict[TopicPartitionKey, dict[int, int]] = defaultdict(dict)
    ends: dict[TopicPartitionKey, tuple[int, int]] = {}
    resumes: dict[TopicPartitionKey, int] = {}
    for raw in stored:
        if raw["link"] == link_id:
            key = (raw["topic"], raw["partition"])
            if raw.get("end"):
                ends[key] = (raw["source"], raw["target"])
                if "resume" in raw:
                    resumes[key] = raw["resume"]
            else:
                segments[key][raw["source"]] = raw["target"]
    maps = {tp: OffsetMap(sorted(found.items())) for tp, found in segments.items()}
    return LinkRecords(maps, ends, resumes)


class MapFollower:
    """One cluster's map topic, followed by a long-lived process (the saga worker): each read takes only
    what was stored since the one before. Read whole, the topic costs what every link the cluster ever
    had stored — with a few thousand partitions, seconds per read, and a switch reads it several times
    while clients are held (tests/bench/test_estate_bench.py). The topic's log start passing what was
    read (a compaction removed tombstones unseen) starts the reading over.

    The reader stays assigned from its first read on, fetching ahead: a new assignment costs a leader
    lookup and an offset query (a first read of a cluster's map 1.0 s, while a switch held clients)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._lock = threading.Lock()
        self._links: dict[str, dict[bytes, dict[str, Any]]] = {}
        """Per link, each live record by key, read: a switch's drain asks for its link's every 2 s, and
        parsing every link's records each time (a transactional topic stores a segment per commit)
        cost seconds of a drain on a busy host."""
        self._read_to: dict[int, int] = {}
        """Per partition of the map topic, the offset read up to."""
        self._reading: list[int] = []
        """The partitions the reader is assigned, each where ``_read_to`` says."""
        settings = {"bootstrap.servers": bootstrap, "group.id": "switchyard-map-follower",
                    "enable.auto.commit": False, "fetch.wait.max.ms": kafka.READ_WAIT_MS}  # fmt: skip
        # fetching ahead all the while: a fetch the broker holds ends as soon as records arrive, and
        # held for librdkafka's default 0.5 s it costs an idle cluster 2 requests a second, not 100
        self._reader = Consumer({**settings, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 500})
        self._probe = Consumer({**settings, "enable.partition.eof": True})

    def link(self, link_id: str) -> LinkRecords:
        """The offset map and final positions of ``link_id`` as stored now."""
        with self._lock:
            try:
                self._catch_up()
            except BaseException:
                # a take cut off (a step's cancellation raised in its thread) loses what the reader had
                # fetched past ``_read_to``: the next read assigns the reader anew from there
                self._reading = []
                raise
            return _records_of(self._links.get(link_id, {}).values(), link_id)

    def close(self) -> None:
        with self._lock:
            self._reader.close()
            self._probe.close()

    def _catch_up(self, timeout_s: float = 60.0) -> None:
        topic = self._probe.list_topics(MAP_TOPIC, timeout=timeout_s).topics.get(MAP_TOPIC)
        if topic is None or topic.error is not None:
            return  # nothing stored yet
        keys = [(MAP_TOPIC, p) for p in sorted(topic.partitions)]
        starts = kafka.watermarks(self._probe, keys, timeout_s=timeout_s)
        ends = kafka.log_ends(self._probe, keys, timeout_s=timeout_s)
        if any(starts[k][0] > self._read_to.get(k[1], 0) for k in keys):
            self._links, self._read_to, self._reading = {}, {}, []
        partitions = [p for _, p in keys]
        behind = {p: ends[(t, p)] for t, p in keys if self._read_to.get(p, 0) < ends[(t, p)]}
        deadline = time.monotonic() + timeout_s
        while True:
            if self._reading != partitions:  # a first read, partitions added, the log start moved, an error
                at = {p: max(self._read_to.get(p, 0), starts[(t, p)][0]) for t, p in keys}
                self._reader.assign([TopicPartition(MAP_TOPIC, p, at[p]) for p in partitions])
                self._reading = partitions
            if all(self._read_to.get(p, 0) >= end for p, end in behind.items()):
                return
            if time.monotonic() > deadline:
                raise KafkaOperationError(f"{self.bootstrap}: {MAP_TOPIC}: not read to its end in time")
            self._take()

    def _take(self) -> None:
        """Apply what the reader holds, up to an error: what came after one is read again (the reader is
        assigned anew where the reading stands); a broker out of reach is waited for, anything else
        raised."""
        for message in self._reader.consume(1000, _READ_WAIT_S):
            error = message.error()
            if error is not None:
                self._reading = []
                if error.code() in _PASSING:
                    time.sleep(0.1)
                    return
                raise KafkaOperationError(f"{self.bootstrap}: {MAP_TOPIC}: {error}")
            key, value = message.key(), message.value()
            if key is not None:
                if value is None:
                    self._links.get(json.loads(key)[0], {}).pop(key, None)
                else:
                    raw = json.loads(value)
                    self._links.setdefault(raw["link"], {})[key] = raw
            self._read_to[message.partition() or 0] = (message.offset() or 0) + 1


_PASSING = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT})
"""Errors an always-assigned reader collects while a broker is out of reach, idle or not."""
_READ_WAIT_S = 0.01
"""How long one take from the reader waits for its 1,000 records: what it holds is taken at once, and
a take waits its whole time for fewer (at 0.1 s, each read of a few new records cost 0.1 s)."""


def forget_link(bootstrap: str, link_id: str) -> int:
    """Tombstone every record of ``link_id`` on the cluster at ``bootstrap``, so that a new link under
    the same id starts from nothing; return how many keys were tombstoned."""
    keys = {key for key, value in _latest(bootstrap).items() if json.loads(value)["link"] == link_id}
    if keys:
        tombstones = ((key, None) for key in sorted(keys))
        store_records(bootstrap, tombstones, f"the removal of link {link_id}'s map")
    return len(keys)


def _latest(bootstrap: str) -> dict[bytes, bytes]:
    """Every live record of the map topic by key: the newest wins, a tombstone removes the key (the
    topic is compacted, but a reader may come before the compaction)."""
    try:
        stored = kafka.read_partitions(bootstrap, MAP_TOPIC)
    except NoSuchTopic:
        return {}
    latest: dict[bytes, bytes] = {}
    for records in stored.values():
        for record in records:  # in offset order
            if record.key is None:
                continue
            if record.value is None:
                latest.pop(record.key, None)
            else:
                latest[record.key] = record.value
    return latest


def read_maps(bootstrap: str, link_id: str) -> dict[TopicPartitionKey, OffsetMap]:
    """Every partition map of ``link_id`` stored on the cluster at ``bootstrap`` (empty: all identical)."""
    return read_link(bootstrap, link_id).maps
