"""The end of every write a cluster acknowledged through this gateway, per partition (see
:mod:`switchyard.acked`): noted from each Produce answer and the request it answers, by their headers'
counts alone."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from workers.gateway.framing import batches


class AckedEnds:
    def __init__(self) -> None:
        self.ends: dict[tuple[str, str, int], int] = {}
        self.changed = False

    def note(self, cluster: str, request: Any, answer: Any) -> None:
        """A Produce ``request`` (its body) and its ``answer`` from ``cluster``."""
        counts = {
            (t.name, p.index): sum(b.last_offset - b.base_offset + 1 for b in batches.read(p.records or b""))
            for t in request.topic_data
            for p in t.partition_data
        }
        for topic in answer.responses:
            for partition in topic.partition_responses:
                count = counts.get((topic.name, partition.index))
                if partition.error_code != ErrorCode.none or partition.base_offset < 0 or not count:
                    continue
                key = (cluster, topic.name, partition.index)
                end = partition.base_offset + count
                if end > self.ends.get(key, -1):
                    self.ends[key] = end
                    self.changed = True
