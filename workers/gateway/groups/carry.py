"""Commits carried across a switch: a consumer's OffsetCommit lands on the cluster it is bound to now.

A group member that joined on the old cluster keeps committing as that member after a flip: the commit
held during the block, and those it makes for the records it fetches from the new cluster before its
next heartbeat tells it to rejoin. The new cluster's coordinator does not know the member, so sent as
is each would be refused (UNKNOWN_MEMBER_ID), and the group would resume from the last synced offset —
the application would process the uncommitted tail again. Instead the gateway commits the offsets on
the new cluster the way an administrator commits for a group without members there (generation -1,
no member id) and answers the client with the new coordinator's answer, so the committed position
covers everything the application processed.

Where an offset points is read against the promoted link's final position for the partition (how far
the old cluster was copied, and the new cluster's end then):

- at or below it, the offset is a position on the old cluster, translated through the link's offset map
  to the position of the same record on the new cluster;
- beyond it, after a planned switch (the old cluster still active: everything it held was copied), the
  member has read records written to the new cluster after the flip, and the offset is a position
  there;
- beyond it, after a failover (the old cluster shielded or down), it may also be a record of the lost
  window, which the new cluster never got: the offset is held to the new cluster's end at the switch,
  so nothing written there since is skipped (some may be read twice instead).

A member switched over and back before it rejoined anywhere is carried the same way, from the cluster
it read last: the gateway had the cluster it joined on forget it at the first switch.

Once the member rejoins on the new cluster its commits go through unchanged. A group that already has
members on the new cluster refuses a commit without a member; the client then gets that refusal, as it
would have without the carry.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from switchyard.mirror.mapstore import LinkRecords
from switchyard.mirror.offsets import OffsetMap

MEMBERLESS = {"generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None}
"""The fields of an OffsetCommit from outside the group (an administrator's commit)."""


def carried_commit(body: Any, records: LinkRecords, *, planned: bool) -> Any:
    """``body`` (an OffsetCommit request) as the new cluster's coordinator takes it from outside the
    group, each offset translated through the link's ``records`` (``planned``: see :func:`translate`)."""
    topics = tuple(
        dataclasses.replace(
            topic,
            partitions=tuple(
                dataclasses.replace(
                    p,
                    committed_offset=translate(
                        records, topic.name, p.partition_index, p.committed_offset, planned=planned
                    ),
                )
                for p in topic.partitions
            ),
        )
        for topic in body.topics
    )
    present = {f.name for f in dataclasses.fields(body)}
    memberless = {name: value for name, value in MEMBERLESS.items() if name in present}
    return dataclasses.replace(body, topics=topics, **memberless)


def translate(records: LinkRecords, topic: str, partition: int, offset: int, *, planned: bool) -> int:
    """The new cluster's position for a member's committed ``offset``; ``planned``: the old cluster is
    still active (a switchover), so everything it held was copied."""
    if offset < 0:
        return offset
    key = (topic, partition)
    final = records.ends.get(key)
    if final is not None and offset > final[0]:
        copied, target_end = final
        return target_end + (offset - copied) if planned else target_end
    return records.maps.get(key, OffsetMap()).position(offset)
