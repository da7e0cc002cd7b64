"""Members of the consumer group protocol (KIP-848) across a switch.

A member of the new protocol has one request, ConsumerGroupHeartbeat: epoch 0 joins, a positive epoch
heartbeats (owned partitions in, assignment out), -1 leaves. The gateway handles it as it does the
classic protocol's requests, with these differences:

- **Topic ids.** Its owned partitions and its assignment name topics by id alone. Clients see one id
  per topic (:mod:`workers.gateway.brokers.topic_identity`), each cluster has its own: the owned ones
  go out as the cluster's, the assignment comes back as the clients' (``to_cluster``, ``to_client``).
- **A member moved by a switch lets its partitions go, then is fenced.** Its heartbeat to the new
  cluster would name a member and an epoch that cluster never knew: a cluster whose group was only ever
  written by the saga's group sync (a classic group without members), or has none, answers
  GROUP_ID_NOT_FOUND, which the Java client takes for fatal. So the gateway answers it itself. While
  it may own partitions, as a coordinator asks a member to give every partition up: no error, its own
  id and epoch, an assignment of nothing (``decision.Action.RELEASE``, ``blocking.released``); the
  client revokes them at its application's next poll, and may commit what it processed meanwhile —
  carried like a classic member's commits (:mod:`workers.gateway.groups.carry`), which the new
  cluster takes while the group has no member there yet. Its acknowledgement,
  owning nothing, is answered FENCED_MEMBER_EPOCH (``decision.Action.FENCE``), as a coordinator
  answers a member it dropped: it loses nothing, and joins again at epoch 0 — on the new cluster, where
  it resumes from the group's committed offsets. Fenced at once, it lost its partitions, and a commit
  of what it had processed was refused (librdkafka: ``_ASSIGNMENT_LOST``), so it processed that again.
  A member that owns nothing, or has not let go ``handling.RELEASE_WITHIN_S`` after it was first
  asked, is fenced (``GroupHandling.owning``). A GROUP_ID_NOT_FOUND answered to a member the gateway
  did not see join (it joined through another gateway, or before this one started) is made
  FENCED_MEMBER_EPOCH too (``answered``).
- **The cluster it left forgets it at once**, as a classic member is removed with LeaveGroup: a
  heartbeat at epoch -1 on its behalf (``leave_fields``), so the group there is empty, and a switch back
  can write its offsets without waiting for the member's session to expire (45 s by default). A member
  counts as one of a cluster from the moment its join is sent there (its id is its own from v1 on), as
  a classic member's: a flip may cut the join, and the cluster would keep the member all the same.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.errors import ErrorCode

from switchyard.frames.entities import replace_known
from workers.gateway.brokers.real_ids import RealIds
from workers.gateway.brokers.upstream import UpstreamError

JOIN, LEAVE = 0, -1
"""A heartbeat's member epoch when it joins, when it leaves (-2: a static member leaving for a while)."""


def heartbeating(body: Any) -> bool:
    """Whether a ConsumerGroupHeartbeat comes from a member of the group (not a join, not a leave)."""
    return int(body.member_epoch) > JOIN


def leave_fields(member_id: str) -> dict[str, Any]:
    """A ConsumerGroupHeartbeat's fields (beyond the group) that remove ``member_id``."""
    return {"member_id": member_id, "member_epoch": LEAVE, "topic_partitions": None}


def members(answer: Any, group: str) -> dict[str, str] | None:
    """The members of ``group`` (id: client id) from its coordinator's ConsumerGroupDescribe ``answer``
    if it is a group of the consumer protocol there; None if it is not (no such group there). Any other
    answer raises :class:`UpstreamError`: the coordinator cannot say, which is not "no members" —
    taken for that, a member there would be counted as one of another cluster."""
    (described,) = answer.groups
    if described.error_code == ErrorCode.group_id_not_found:
        return None
    if described.error_code != ErrorCode.none:
        raise UpstreamError(f"ConsumerGroupDescribe of group {group} answered {described.error_code.name}")
    return {m.member_id: m.client_id for m in described.members}


async def to_cluster(body: Any, cluster: str, ids: RealIds) -> Any:
    """A heartbeat's owned partitions named by ``cluster``'s topic ids; a topic it no longer has is left
    out (it has no partitions there to own)."""
    if not body.topic_partitions:
        return body
    owned = []
    for topic in body.topic_partitions:
        real = await ids.real(cluster, topic.topic_id)
        if real is not None:
            owned.append(dataclasses.replace(topic, topic_id=real))
    return dataclasses.replace(body, topic_partitions=tuple(owned))


async def to_client(answer: Any, cluster: str, ids: RealIds) -> Any:
    """A heartbeat's answer with its assignment named by the topic ids clients see."""
    assignment = answer.assignment
    if assignment is None or not assignment.topic_partitions:
        return answer
    assigned = []
    for topic in assignment.topic_partitions:
        presented = await ids.presented(cluster, topic.topic_id)
        assigned.append(dataclasses.replace(topic, topic_id=presented or topic.topic_id))
    return dataclasses.replace(
        answer, assignment=dataclasses.replace(assignment, topic_partitions=tuple(assigned))
    )


def answered(request_body: Any, answer: Any) -> Any:
    """The answer as the member gets it: a group unknown to the cluster is, to a member that heartbeats,
    its own membership unknown there (see the module)."""
    if answer.error_code == ErrorCode.group_id_not_found and heartbeating(request_body):
        return replace_known(answer, error_code=ErrorCode.fenced_member_epoch, error_message=None)
    return answer
