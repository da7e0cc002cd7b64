"""Where offset maps live: a compacted topic on the link's target cluster, one record per segment.

The map sits next to the data it describes, so whoever can read the target's copy (a consumer being
moved, the verification job, the reverse link) can translate offsets, even with ZooKeeper gone. Each
segment is its own key, so compaction never drops one; the newest record for a key wins.
"""

from __future__ import annotations

import json
from collections import defaultdict

from switchyard import kafka
from switchyard.errors import KafkaOperationError
from switchyard.mirror.offsets import OffsetMap

MAP_TOPIC = "switchyard.offset-map"
MAP_TOPIC_CONFIG = {"cleanup.policy": "compact"}
TopicPartitionKey = tuple[str, int]


def segment_record(link_id: str, topic: str, partition: int, source: int, target: int) -> tuple[bytes, bytes]:
    """The key and value that store one segment."""
    key = json.dumps([link_id, topic, partition, source]).encode()
    value = json.dumps({"link": link_id, "topic": topic, "partition": partition, "source": source,
                        "target": target}).encode()  # fmt: skip
    return key, value


def read_maps(bootstrap: str, link_id: str) -> dict[TopicPartitionKey, OffsetMap]:
    """Every partition map of ``link_id`` stored on the cluster at ``bootstrap`` (empty: all identical)."""
    try:
        stored = kafka.read_partitions(bootstrap, MAP_TOPIC)
    except KafkaOperationError as exc:
        if "no such topic" in str(exc):
            return {}
        raise
    segments: dict[TopicPartitionKey, dict[int, int]] = defaultdict(dict)
    for records in stored.values():
        for record in records:
            if record.value is None:
                continue
            raw = json.loads(record.value)
            if raw["link"] == link_id:
                segments[(raw["topic"], raw["partition"])][raw["source"]] = raw["target"]
    return {tp: OffsetMap(sorted(found.items())) for tp, found in segments.items()}
