"""Reading an offset range of one partition with the Kafka client, as a Spark task does it."""

from __future__ import annotations

import time
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from switchyard.errors import KafkaOperationError
from switchyard.kafka import watermarks


def read_range(
    bootstrap: str, topic: str, partition: int, start: int, end: int, *, timeout_s: float = 120.0
) -> Iterator[Message]:
    """The records of ``topic[partition]`` with offsets in [start, end), committed ones only, in order."""
    if end <= start:
        return
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "switchyard-verify",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 100,
        }
    )
    tp = TopicPartition(topic, partition, start)
    consumer.assign([tp])
    deadline = time.monotonic() + timeout_s
    position = start
    try:
        while True:
            if time.monotonic() > deadline:
                raise KafkaOperationError(
                    f"{bootstrap}: {topic}[{partition}]: [{start}, {end}) not read in time"
                )
            # no more than the range can still hold: a batch waits out its time-out until it is full
            for msg in consumer.consume(min(1000, end - position), 0.5):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # ListOffsets, unlike a leader elected a moment ago in its Fetch answers, is
                        # never short of what the leader before acknowledged (KIP-207)
                        (_, listed_end), *_ = watermarks(consumer, [(topic, partition)]).values()
                        if listed_end <= (msg.offset() or 0):
                            return  # the log ends before the range does: there is nothing more
                        continue
                    raise KafkaOperationError(f"{bootstrap}: {topic}[{partition}]: {error}")
                if (msg.offset() or 0) >= end:
                    return
                yield msg
            position = max(position, consumer.position([tp])[0].offset)
            if position >= end:
                return
    finally:
        consumer.close()
