"""The copy session's question to its group, on Apache Kafka: is this member in it? A session whose
group never took it back after its session ended copied nothing while the gateway held a switch's
clients (``workers/mirror/watch.py``)."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer

from switchyard import kafka
from switchyard.admins import Admins
from switchyard.config import Config
from switchyard.stack import Stack
from tests.helpers.records import join
from workers.mirror.watch import is_member


def test_the_group_says_whether_it_lists_a_member(stack: Stack, stack_config: Config) -> None:
    primary = stack_config.clusters["primary"].bootstrap
    topic, group = f"watch-{uuid.uuid4().hex[:8]}", f"watch-{uuid.uuid4().hex[:8]}"
    kafka.create_topics(primary, [topic], partitions=1)
    admins = Admins(lambda _: primary)
    consumer = Consumer({"bootstrap.servers": primary, "group.id": group, "session.timeout.ms": 6000})
    try:
        join(consumer, topic, "the consumer")
        member = consumer.memberid()
        assert member
        assert is_member(admins, "primary", group, member) is True
        assert is_member(admins, "primary", group, f"{member}-not") is False
        assert is_member(admins, "primary", group, "") is False  # librdkafka's id while it is no member
        consumer.close()
        assert is_member(admins, "primary", group, member) is False  # left
    finally:
        consumer.close()
    away = Admins(lambda _: "127.0.0.1:1")
    assert is_member(away, "gone", group, "", timeout_s=1) is None  # not known: no new session for that
