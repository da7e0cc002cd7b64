"""Commits carried across a switch: a consumer's OffsetCommit lands on the cluster it is bound to now.

A group member that joined on the old cluster keeps committing as that member after a flip: the commit
held during the block, and those it makes for the records it fetches from the new cluster before its
next heartbeat tells it to rejoin. The new cluster's coordinator does not know the member, so sent as
is each would be refused (UNKNOWN_MEMBER_ID), and the group would resume from the last synced offset —
the application would process the uncommitted tail again. Instead the gateway commits the offsets on
the new cluster the way an administrator commits for a group without members there (generation -1,
no member id) and answers the client with the new coordinator's answer, so the committed position
covers everything the application processed.

The offsets are those clients see, the topic's home offsets (:mod:`switchyard.mirror.presented`): they
are sent on as clients see them, and put in the new cluster's offsets as any commit sent there is
(:mod:`workers.gateway.brokers.mapped`). One thing is decided here, against the new cluster's end at the
switch (the promoted link's final position, in client offsets): an offset beyond it, after a failover
(the old cluster shielded or down), may be a record of the lost window, which the new cluster never got.
It is held to that end, so nothing written there since is skipped (some may be read twice instead).
After a planned switch everything the old cluster held was copied, and such an offset is a record the
member read on the new cluster after the flip.

A member switched over and back before it rejoined anywhere is carried the same way, from the cluster
it read last: the gateway had the cluster it joined on forget it at the first switch.

Once the member rejoins on the new cluster its commits go through unchanged. A group that already has
members on the new cluster refuses a commit without a member; the client then gets that refusal, as it
would have without the carry — unless one of those members is its own client's, joined through another
process of the gateway: then it is told to send the commit again (``GroupHandling._joined_elsewhere``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

MEMBERLESS = {"generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None}
"""The fields of an OffsetCommit from outside the group (an administrator's commit)."""


def carried_commit(body: Any, ends: Callable[[str, int], int | None], *, planned: bool) -> Any:
    """``body`` (an OffsetCommit request) as the new cluster's coordinator takes it from outside the
    group, each offset held within the new cluster's end at the switch after a failover (``ends``: per
    partition, in client offsets, None where unknown; ``planned``: a planned switch; see :func:`held`)."""
    topics = tuple(
        dataclasses.replace(
            topic,
            partitions=tuple(
                dataclasses.replace(
                    p,
                    committed_offset=held(
                        ends(topic.name, p.partition_index), p.committed_offset, planned=planned
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


def held(end: int | None, offset: int, *, planned: bool) -> int:
    """A member's committed ``offset``, held to ``end`` (the new cluster's at the switch, in client
    offsets) after a failover (see the module); ``planned``: the old cluster is still active (a
    switchover), so everything it held was copied."""
    return offset if planned or end is None or offset <= end else end
