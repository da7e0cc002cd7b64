"""What a saga worker builds at start, on real Kafka and ZooKeeper: each cluster's clients started ahead
of the sagas, so the first switch after a start does not pay for them while clients are held (an
idempotent producer's id, a map topic read whole), and a cluster that does not answer is left alone.
"""

from __future__ import annotations

import socket
import uuid

import pytest

from activities.deps import WARM_TIMEOUT_S
from switchyard import kafka
from switchyard.config import ClusterConfig, Config
from switchyard.errors import UnknownPartition
from switchyard.mirror.mapstore import MAP_TOPIC
from switchyard.routing import RoutingStore
from tests.helpers.deps import worker_deps


def test_a_worker_starts_each_clusters_clients_ahead_and_one_that_does_not_answer_is_left_alone(
    routing: RoutingStore, stack_config: Config
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # takes connections, never answers
        clusters = {
            **stack_config.clusters,
            "silent": ClusterConfig(bootstrap=f"127.0.0.1:{silent.getsockname()[1]}"),
        }
        config = stack_config.model_copy(update={"clusters": clusters})
        topic = f"warm-{uuid.uuid4().hex[:6]}"
        kafka.create_topics(stack_config.clusters["primary"].bootstrap, [topic], partitions=1)
        with worker_deps(routing, config) as deps:
            threads = {t.name: t for t in deps.warm()}
            # a step on a live cluster goes on while the silent one's clients wait for an answer
            assert deps.ends("primary", [(topic, 0)]) == {(topic, 0): 0}
            assert threads["warm-silent"].is_alive()
            for thread in threads.values():
                thread.join(3 * WARM_TIMEOUT_S)
            assert not any(t.is_alive() for t in threads.values())
            for started in (deps._probes, deps._producers, deps._maps):
                assert set(started) == {"primary", "standby"}
            for cluster in ("primary", "standby"):
                assert kafka.partitions(stack_config.clusters[cluster].bootstrap, lambda t: t == MAP_TOPIC)


def test_a_topic_created_after_the_end_reader_asked_for_it_is_read_at_once(
    routing: RoutingStore, stack_config: Config
) -> None:
    """The worker's log-end reader is kept, and librdkafka keeps what it learnt of a topic: asked before
    the topic existed (a partition migration creates its copy on the target, then reads its end), it
    answered "unknown partition" after the topic was made — one full run's migration failed on it for a
    minute, every retry. A reader that does not know a partition is made anew and asked once more."""
    standby = stack_config.clusters["standby"].bootstrap
    topic = f"late-{uuid.uuid4().hex[:6]}"
    with worker_deps(routing, stack_config) as deps:
        with pytest.raises(UnknownPartition):
            deps.ends("standby", [(topic, 0)])
        kafka.create_topics(standby, [topic], partitions=1)
        assert deps.ends("standby", [(topic, 0)]) == {(topic, 0): 0}
