"""How the mirror writes one batch read from the source: the segments its gaps need stored first, in
one go, and a partition's records of each segment acknowledged before those of its next are written (no
target batch may span two segments: the gateway rebases a fetched batch by its header alone)."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace
from typing import Any

from confluent_kafka import TIMESTAMP_CREATE_TIME

from switchyard.mirror.mapstore import MAP_TOPIC
from switchyard.mirror.offsets import OffsetMap
from switchyard.model import LinkState
from workers.mirror.copier import LinkCopier
from workers.mirror.progress import PartitionCopy


class Producer:
    """Records what the copier asks of it, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def produce(self, topic: str, value: bytes | None, key: bytes | None, **_: Any) -> None:
        if topic == MAP_TOPIC:
            self.calls.append(f"segment {json.loads(value or b'{}')['source']}")
        else:
            self.calls.append((value or b"").decode())

    def flush(self, _timeout: float) -> int:
        self.calls.append("flush")
        return 0

    def poll(self, _timeout: float) -> int:
        return 0


def record(partition: int, offset: int) -> SimpleNamespace:
    value = f"p{partition}@{offset}".encode()
    return SimpleNamespace(
        error=lambda: None, topic=lambda: "orders", partition=lambda: partition, offset=lambda: offset,
        value=lambda: value, key=lambda: None, headers=lambda: None,
        timestamp=lambda: (TIMESTAMP_CREATE_TIME, 1),
    )  # fmt: skip


def copier(producer: Producer) -> LinkCopier:
    """A copier of ``orders`` partitions 0 and 1, nothing copied yet (no thread, no cluster)."""
    made = object.__new__(LinkCopier)
    made._wanted = SimpleNamespace(id="link-1", state=LinkState.RUNNING)  # type: ignore[assignment]
    made._partitions = {
        ("orders", p): PartitionCopy(
            "orders", p, OffsetMap(), next_target=0, acked_target=0, start=0, read_to=0
        )
        for p in (0, 1)
    }
    made._failed, made._failure, made._stop = {}, None, threading.Event()
    made._clients = SimpleNamespace(producer=producer)  # type: ignore[assignment]
    return made


def test_a_batchs_segments_are_stored_together_and_each_partitions_segments_written_a_round_apart() -> None:
    """Partition 0 has markers at 2 and 5 (two transactions committed), partition 1 none; the batch
    interleaves them as librdkafka may."""
    producer = Producer()
    made = copier(producer)
    batch = [record(0, 0), record(0, 1), record(1, 0), record(1, 1), record(0, 3), record(0, 4), record(1, 2),
             record(0, 6), record(0, 7)]  # fmt: skip
    made._copy(batch)  # type: ignore[arg-type]
    assert producer.calls == [
        "p0@0", "p0@1", "p1@0", "p1@1", "p1@2",  # no gap before them: written at once
        "segment 3", "segment 6", "flush",  # the batch's segments, acknowledged with all before them
        "p0@3", "p0@4",  # partition 0's first segment's records
        "flush",  # acknowledged before the next segment's
        "p0@6", "p0@7",
    ]  # fmt: skip
    assert made._partitions[("orders", 0)].offset_map.segments == [(3, 2), (6, 4)]
    assert made._partitions[("orders", 1)].offset_map.segments == []
    assert [made._partitions[("orders", p)].next_target for p in (0, 1)] == [6, 3]


def test_a_run_that_continues_a_segment_after_another_partitions_waits_in_its_round() -> None:
    """Partition 0's records after a gap wait for its segment, and so does the rest of that segment when
    another partition's run comes between: written at once, it would land before the segment."""
    producer = Producer()
    made = copier(producer)
    made._copy([record(0, 1), record(1, 0), record(0, 2)])  # type: ignore[arg-type]  # offset 0: a marker
    assert producer.calls == ["p1@0", "segment 1", "flush", "p0@1", "p0@2"]
