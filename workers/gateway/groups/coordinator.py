"""Requests the gateway makes of a group's coordinator on its own account: finding it, listing a
group's members, and removing a member a switch moved or left behind (LeaveGroup, as an admin client's
removal does, or a consumer-protocol member's heartbeat that leaves; Apache Kafka lets a round go on
without a member removed while its join waits, and elects another leader when the leader leaves)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import FrameError, request_schema
from workers.gateway.brokers.directory import BrokerDirectory
from workers.gateway.brokers.upstream import Upstream, UpstreamError
from workers.gateway.framing.sasl import Credentials
from workers.gateway.groups import consumer_protocol
from workers.gateway.groups.consumer_protocol import leave_fields
from workers.gateway.groups.members import Member
from workers.gateway.routing import apis

log = logging.getLogger(__name__)
_ATTEMPTS = 3
_AGAIN_S = 0.5


async def coordinator(brokers: BrokerDirectory, upstream: Upstream, group: str) -> int:
    """The broker of ``upstream``'s cluster that coordinates ``group``."""
    version = brokers.version(apis.FIND_COORDINATOR, 3)
    fields: dict[str, Any] = {"key": group} | ({"key_type": 0} if version >= 1 else {})
    answer = await upstream.ask(apis.FIND_COORDINATOR, version, **fields)
    if answer.error_code != ErrorCode.none:
        raise UpstreamError(f"{upstream.cluster}: no coordinator for group {group}: {answer.error_code.name}")
    return int(answer.node_id)


class Coordinators:
    """Asks coordinators of one cluster or another as one client (its credentials), over connections
    of their own: the asking may outlive the client's session (the flip closes the session's
    connections, and what was sent over them just then fails)."""

    def __init__(self, brokers: BrokerDirectory, credentials: Credentials | None) -> None:
        self.brokers, self.credentials = brokers, credentials

    async def members(self, cluster: str, group: str) -> tuple[dict[str, str], bool, bool] | None:
        """The group's members on ``cluster`` (id: client id), whether it is settled there (not
        mid-rebalance), and whether it is a group of the consumer protocol (KIP-848); None when the
        coordinator cannot say (logged)."""
        version = self.brokers.version(apis.DESCRIBE_GROUPS, 5)
        try:
            answer = await self._ask(
                cluster, group, apis.DESCRIBE_GROUPS, version,
                {"groups": (group,), "include_authorized_operations": False},
            )  # fmt: skip
            (described,) = answer.groups
            dead = described.error_code == ErrorCode.none and described.group_state == "Dead"
            if dead and apis.CONSUMER_GROUP_HEARTBEAT in self.brokers.offered:
                # no classic group: none at all, or one of the consumer protocol, which DescribeGroups
                # answers as Dead without its members (not asked where a cluster lacks the protocol,
                # whose broker would close the connection: the gateway offers it to no one)
                answer = await self._ask(
                    cluster, group, apis.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": (group,)}
                )
                consumer = consumer_protocol.members(answer, group)
                if consumer is not None:
                    return consumer, True, True
        except (UpstreamError, TimeoutError, FrameError) as exc:
            log.warning("group %s: cannot tell its members on %s: %s", group, cluster, exc)
            return None
        if described.error_code != ErrorCode.none:
            log.info(
                "group %s: %s cannot tell its members: %s",
                group,
                cluster,
                ErrorCode(described.error_code).name,
            )
            return None
        settled = described.group_state in ("Empty", "Dead", "Stable")
        return {m.member_id: m.client_id for m in described.members}, settled, False

    async def leave(self, member: Member, group: str, member_id: str) -> bool:
        """Remove ``member_id`` from the cluster it joined on, on its behalf (LeaveGroup, or for a member
        of the consumer protocol a heartbeat that leaves): whether the cluster has it no more (a failure
        is logged)."""
        cluster = member.cluster
        if member.consumer:
            api, version = apis.CONSUMER_GROUP_HEARTBEAT, self.brokers.version(apis.CONSUMER_GROUP_HEARTBEAT)
            fields = {"group_id": group, **leave_fields(member_id)}
        else:
            api, version = apis.LEAVE_GROUP, self.brokers.version(apis.LEAVE_GROUP, 5)
            fields = {"group_id": group, "member_id": member_id}
            if version >= 3:  # members named in a list (KIP-345); a dynamic member by its id alone
                entry = element_type(request_schema(apis.LEAVE_GROUP, version), "members")
                named = {"member_id": member_id, "group_instance_id": None}
                reason = {"reason": "switched"} if version >= 5 else {}
                fields = {"group_id": group, "members": (make(entry, **named, **reason),)}
        try:
            answer = await self._ask(cluster, group, api, version, fields)
        except (UpstreamError, TimeoutError, FrameError) as exc:
            log.warning("group %s: could not remove member %s from %s: %s", group, member_id, cluster, exc)
            return False
        errors = {answer.error_code, *(m.error_code for m in getattr(answer, "members", ()))}
        gone = {ErrorCode.none, ErrorCode.unknown_member_id, ErrorCode.group_id_not_found}
        if errors - gone:  # unknown: it had expired already (with its group, where it was the last)
            log.warning("group %s: %s did not remove member %s: %s", group, cluster, member_id, errors)
            return False
        log.info("group %s: member %s removed from %s, which it left", group, member_id, cluster)
        return True

    async def _ask(self, cluster: str, group: str, api_key: int, version: int, fields: dict[str, Any]) -> Any:
        for attempt in range(_ATTEMPTS):
            opened = [self.brokers.upstream(cluster, None, self.credentials)]
            try:
                node = await coordinator(self.brokers, opened[0], group)
                opened.append(self.brokers.upstream(cluster, node, self.credentials))
                return await opened[1].ask(api_key, version, **fields)
            except (UpstreamError, TimeoutError, FrameError):
                if attempt + 1 == _ATTEMPTS:
                    raise
                await asyncio.sleep(_AGAIN_S)
            finally:
                for upstream in opened:
                    upstream.close()
        raise AssertionError("unreachable")
