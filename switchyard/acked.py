"""How far each partition's writes were acknowledged, as the gateways saw it: where a fault migration
chooses its end offset from when the origin cannot be asked (seed 004's first open problem).

Each gateway notes the end of every write a cluster acknowledged through it — the answer's base offset
plus the records the request carried — and publishes the highest per partition every few seconds in
``acked/<gateway id>``. The node is persistent, unlike the usage report: the gateways that saw a
cluster's last writes may have gone down with it, and what they saw still bounds what it acknowledged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from switchyard.errors import RoutingUnavailable
from switchyard.routing.layout import Layout

Ends = Mapping[tuple[str, str, int], int]
"""(cluster, topic, partition) -> the offset after the last acknowledged record."""


def encode(ends: Ends) -> bytes:
    nested: dict[str, dict[str, dict[str, int]]] = {}
    for (cluster, topic, partition), end in ends.items():
        nested.setdefault(cluster, {}).setdefault(topic, {})[str(partition)] = end
    return json.dumps(nested, sort_keys=True, separators=(",", ":")).encode()


def decode(data: bytes) -> dict[tuple[str, str, int], int]:
    nested = json.loads(data)
    return {
        (cluster, topic, int(partition)): int(end)
        for cluster, topics in nested.items()
        for topic, partitions in topics.items()
        for partition, end in partitions.items()
    }


def acked_end(zk: KazooClient, layout: Layout, cluster: str, topic: str, partition: int) -> int | None:
    """The highest end any gateway saw acknowledged for the partition on ``cluster``; None if none saw
    a write."""
    return acked_ends(zk, layout, cluster).get((topic, partition))


def acked_ends(zk: KazooClient, layout: Layout, cluster: str) -> dict[tuple[str, int], int]:
    """The highest end any gateway saw acknowledged for each partition of ``cluster`` it saw written."""
    folder = layout.folder("acked")
    found: dict[tuple[str, int], int] = {}
    try:
        for name in zk.get_children(folder):
            try:
                data, _ = zk.get(f"{folder}/{name}")
            except NoNodeError:
                continue
            try:
                ends = decode(data) if data else {}
            except (ValueError, TypeError, AttributeError):  # a report not of this format: ignored
                continue
            for (where, topic, partition), end in ends.items():
                if where == cluster and end > found.get((topic, partition), -1):
                    found[(topic, partition)] = end
    except NoNodeError:
        return {}
    except KazooException as exc:
        raise RoutingUnavailable(f"ZooKeeper: cannot read {folder}: {exc!r}") from exc
    return found
