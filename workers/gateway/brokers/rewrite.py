"""Rewrite the answers that name brokers, so clients only ever learn virtual brokers.

Metadata (brokers, controller, partition leaders and replicas), FindCoordinator (the coordinator),
DescribeCluster (brokers, controller) and DescribeTopicPartitions (leaders and replicas) come back from
a real cluster naming its real nodes; each real node id becomes its virtual id, and each address the
gateway's own for that virtual broker. So does a Produce answer (v10+) that hints at a partition's new
leader (KIP-951: its id, and the addresses of the brokers it names): a client that took the hint as sent
would connect to the real broker, around the gateway.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from switchyard.frames.entities import replace_known as _replace
from workers.gateway.routing import apis

BROKER_NAMING = frozenset(
    {apis.METADATA, apis.FIND_COORDINATOR, apis.DESCRIBE_CLUSTER, apis.DESCRIBE_TOPIC_PARTITIONS}
)

Address = Callable[[int], tuple[str, int]]
"""Virtual id -> the (host, port) clients reach that virtual broker at."""


def real_nodes(api_key: int, body: Any) -> set[int]:
    """The real node ids an answer names (those need a virtual id before it can be rewritten)."""
    if api_key == apis.METADATA:
        return {b.node_id for b in body.brokers}
    if api_key == apis.FIND_COORDINATOR:
        return {body.node_id} if body.node_id >= 0 else set()
    if api_key == apis.DESCRIBE_CLUSTER:
        return {b.broker_id for b in body.brokers}
    if api_key == apis.DESCRIBE_TOPIC_PARTITIONS:
        return {
            n
            for t in body.topics
            for p in t.partitions
            for n in (p.leader_id, *p.replica_nodes, *p.isr_nodes, *(p.eligible_leader_replicas or ()),
                      *(p.last_known_elr or ()), *p.offline_replicas)
            if n >= 0
        }  # fmt: skip
    if api_key == apis.PRODUCE:
        return {e.node_id for e in getattr(body, "node_endpoints", ())} | {
            p.current_leader.leader_id
            for t in body.responses
            for p in t.partition_responses
            if getattr(p, "current_leader", None) is not None and p.current_leader.leader_id >= 0
        }
    return set()


def leader_hints(body: Any) -> bool:
    """Whether a Produce answer names brokers (KIP-951): most name none, and go back untouched."""
    return bool(real_nodes(apis.PRODUCE, body))


def rewrite(api_key: int, body: Any, virtual: Mapping[int, int], address: Address, *, cluster_id: str) -> Any:
    """``body`` with every real node id replaced by its virtual id, and the cluster id by ``cluster_id``."""

    def vid(node: int) -> int:
        return virtual.get(node, -1) if node >= 0 else node

    def vids(nodes: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(vid(n) for n in nodes)

    def partitions(topics: Any) -> tuple[Any, ...]:
        return tuple(
            dataclasses.replace(
                t,
                partitions=tuple(
                    _replace(
                        p,
                        leader_id=vid(p.leader_id),
                        replica_nodes=vids(p.replica_nodes),
                        isr_nodes=vids(p.isr_nodes),
                        offline_replicas=vids(getattr(p, "offline_replicas", ())),
                        eligible_leader_replicas=_maybe(vids, getattr(p, "eligible_leader_replicas", None)),
                        last_known_elr=_maybe(vids, getattr(p, "last_known_elr", None)),
                    )
                    for p in t.partitions
                ),
            )
            for t in topics
        )

    if api_key == apis.DESCRIBE_TOPIC_PARTITIONS:
        return dataclasses.replace(body, topics=partitions(body.topics))
    if api_key == apis.METADATA:
        brokers = []
        for b in body.brokers:
            host, port = address(vid(b.node_id))
            brokers.append(dataclasses.replace(b, node_id=vid(b.node_id), host=host, port=port))
        topics = partitions(body.topics)
        return _replace(
            body,
            brokers=tuple(brokers),
            topics=topics,
            controller_id=vid(_get(body, "controller_id")),
            cluster_id=cluster_id,
        )
    if api_key == apis.FIND_COORDINATOR:
        if body.node_id < 0:
            return body
        host, port = address(vid(body.node_id))
        return dataclasses.replace(body, node_id=vid(body.node_id), host=host, port=port)
    if api_key == apis.PRODUCE:
        endpoints = []
        for e in getattr(body, "node_endpoints", ()):
            host, port = address(vid(e.node_id))
            endpoints.append(dataclasses.replace(e, node_id=vid(e.node_id), host=host, port=port))
        responses = tuple(
            dataclasses.replace(
                t,
                partition_responses=tuple(
                    _replace(  # its epoch unknown, as every epoch clients see (see topic_identity)
                        p,
                        current_leader=dataclasses.replace(
                            p.current_leader, leader_id=vid(p.current_leader.leader_id), leader_epoch=-1
                        ),
                    )
                    if getattr(p, "current_leader", None) is not None
                    else p
                    for p in t.partition_responses
                ),
            )
            for t in body.responses
        )
        return _replace(body, responses=responses, node_endpoints=tuple(endpoints))
    if api_key == apis.DESCRIBE_CLUSTER:
        brokers = []
        for b in body.brokers:
            host, port = address(vid(b.broker_id))
            brokers.append(dataclasses.replace(b, broker_id=vid(b.broker_id), host=host, port=port))
        return dataclasses.replace(
            body, brokers=tuple(brokers), controller_id=vid(body.controller_id), cluster_id=cluster_id
        )
    return body


def _maybe(change: Callable[[Any], Any], value: Any) -> Any:
    return None if value is None else change(value)


def _get(entity: Any, name: str) -> int:
    return int(getattr(entity, name, -1))
