"""`make demo`: the embedded stack up, then a real produce/consume round trip on every cluster.

Each run uses a topic of its own, so a stack that is already up (and holds earlier demo topics) gives
the same answer every time.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from switchyard import kafka
from switchyard.config import Config
from switchyard.errors import KafkaOperationError
from switchyard.stack import TESTBED_CONSUMER_SETTINGS, Stack


@dataclass(frozen=True)
class RoundTrip:
    cluster: str
    topic: str
    produced: int
    consumed: int


def round_trip(bootstrap: str, cluster: str, topic: str, count: int) -> RoundTrip:
    """Produce ``count`` keyed records, read them back in a consumer group, and compare them all."""
    kafka.create_topics(bootstrap, [topic], partitions=3)
    sent = [kafka.Record(f"key-{i}".encode(), _value(cluster, i)) for i in range(count)]
    produced = kafka.produce(bootstrap, topic, sent)
    got = kafka.consume(
        bootstrap, topic, group=f"{topic}-reader", count=count, settings=TESTBED_CONSUMER_SETTINGS
    )
    expected = {(r.key, r.value) for r in sent}
    received = {(r.key, r.value) for r in got}
    if received != expected or len(got) != count:
        raise KafkaOperationError(
            f"{cluster}: {topic}: round trip mismatch: {len(expected - received)} missing, "
            f"{len(got) - len(received & expected)} unexpected or repeated"
        )
    return RoundTrip(cluster, topic, produced, len(got))


def run(config: Config, *, count: int = 1000, say: Callable[[str], None] = print) -> list[RoundTrip]:
    say("== bringing up the embedded stack")
    Stack(config).up(progress=lambda line: say(f"   {line}"))
    topic = f"switchyard-demo-{uuid.uuid4().hex[:8]}"
    results = []
    for cluster_id, cluster in config.clusters.items():
        say(f"== round trip on {cluster_id} ({cluster.bootstrap}), topic {topic}")
        result = round_trip(cluster.bootstrap, cluster_id, topic, count)
        say(f"   produced {result.produced}, consumed {result.consumed}, every record matched")
        results.append(result)
    return results


def _value(cluster: str, i: int) -> bytes:
    return hashlib.sha256(f"{cluster}/{i}".encode()).hexdigest().encode() * 4
