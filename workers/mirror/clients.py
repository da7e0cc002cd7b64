"""The Kafka clients one copy session uses: the consumer that reads the source as the link's group
member, the idempotent producer that writes the target, and two consumers that only read log ends."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, Producer

from switchyard.config import MirrorConfig

log = logging.getLogger(__name__)
LEAVE_WAIT_S = 2.0
_STATS_MIN_S = 1.0


def group_id(link_id: str) -> str:
    return f"switchyard-mirror.{link_id}"


@dataclass
class CopyClients:
    consumer: Consumer
    producer: Producer
    probe: Consumer
    """Reads the target's log ends."""
    source_probe: Consumer
    """Reads the source's log ends."""

    @classmethod
    def connect(
        cls,
        settings: MirrorConfig,
        link_id: str,
        member: str,
        *,
        source: str,
        target: str,
        stats: Callable[[str], None],
    ) -> CopyClients:
        producer = Producer(
            {
                "bootstrap.servers": target,
                "enable.idempotence": True,
                "enable.gapless.guarantee": True,  # a failed batch stops the producer before later ones land
                "message.timeout.ms": 0,  # never give up on a record locally (gapless does not cover that)
                "linger.ms": 5,
                **settings.producer,
            }
        )
        probe, source_probe = (
            Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": f"{group_id(link_id)}.probe",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                }
            )
            for bootstrap in (target, source)
        )
        consumer = Consumer(
            {
                "bootstrap.servers": source,
                "group.id": group_id(link_id),
                "client.id": f"switchyard-mirror@{member}",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                # the source's ends for the status's lag; no more often than once a second: librdkafka
                # builds the statistics of every broker and partition, and the copy waits meanwhile
                # (every 50 ms cost the copy a sixth of its rate in the benchmark)
                "statistics.interval.ms": int(max(settings.status_interval_s, _STATS_MIN_S) * 1000),
                "fetch.wait.max.ms": 100,  # bounds the copy's latency on brokers that hold fetches long
                # with the fetch queue full (queued.min.messages), fetching resumes this long after it
                # was last checked: at the default 1 s the copy emptied the queue and then waited
                "fetch.queue.backoff.ms": 10,
                "stats_cb": stats,
                # partitions the source gains are taken up within a status interval, not librdkafka's
                # 5 min (a Metadata request for the link's topics each interval): grow_copies
                "topic.metadata.refresh.interval.ms": int(
                    min(settings.status_interval_s, settings.topic_refresh_s) * 1000
                ),
                **settings.consumer,
            }
        )
        return cls(consumer, producer, probe, source_probe)

    def close(self, link_id: str, *, stopping: bool) -> None:
        self.producer.flush(10)
        self.probe.close()
        self.source_probe.close()
        if stopping:
            _close_within(self.consumer, LEAVE_WAIT_S, link_id)
        else:  # a new session follows: the old member must be gone from the group first
            self.consumer.close()


def _close_within(consumer: Consumer, wait_s: float, link_id: str) -> None:
    """Close ``consumer``, waiting at most ``wait_s``: leaving a group in the middle of a join waits for
    the join to end (up to the session timeout), and a stopping process should not. Its partitions are
    then handed on when the group's session times out, as after a crash; nothing is lost either way,
    since copying resumes from the target."""
    closed = threading.Event()

    def close() -> None:
        consumer.close()
        closed.set()

    threading.Thread(target=close, name=f"mirror-leave-{link_id}", daemon=True).start()
    if not closed.wait(wait_s):
        log.warning("link %s: left without waiting for the group (a join was in progress)", link_id)
