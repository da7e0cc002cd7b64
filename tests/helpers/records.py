"""Writing records and offsets directly to a cluster, and joining a group, as a test's set-up."""

from __future__ import annotations

import time

from confluent_kafka import Consumer

RECENT_MS = (int(time.time()) - 3600) * 1000
"""A fixed timestamp for a test run's records, an hour old: within any topic's retention. (A date years
back is older than the broker's seven days, and Apache Kafka's retention deletes such records within
seconds of their writing.)"""


def commit_offset(bootstrap: str, group: str, topic: str, offset: int, partition: int = 0) -> None:
    """Commit ``offset`` for ``group`` as a consumer would, without joining the group."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    finally:
        consumer.close()


def fill_topic(bootstrap: str, topic: str, count: int, *, partitions: int, size: int = 1024) -> None:
    """``count`` records of ``size`` bytes spread round-robin over the partitions, as fast as the broker
    takes them (benchmark set-up); keys are the record numbers, timestamps fixed for the run and
    increasing. Idempotent, so that the same call on two clusters writes the same logs: librdkafka's
    default producer may resend a batch behind later ones (a million requests in flight), writing a
    record twice or out of order on one cluster only (a verification bench run found the two copies
    diverged, the likely cause)."""
    from confluent_kafka import Producer

    from switchyard import kafka

    kafka.create_topics(bootstrap, [topic], partitions=partitions)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "enable.idempotence": True}
    )
    payload = b"q" * size
    for i in range(count):
        while True:
            try:
                producer.produce(
                    topic, payload, str(i).encode(), partition=i % partitions, timestamp=RECENT_MS + i
                )
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0


def join(consumer: Consumer, topic: str, what: str, timeout_s: float = 30.0) -> None:
    """Subscribe ``consumer`` to ``topic`` and poll until its group has given it partitions."""
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout_s
    while not consumer.assignment():
        assert time.monotonic() < deadline, f"{what} never joined"
        consumer.poll(0.2)
