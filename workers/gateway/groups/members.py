"""Group members as the gateway saw them join: where (which cluster), and their session time-out.

Where a member joined tells whether its commits must be carried to another cluster after a switch
(:mod:`workers.gateway.groups.carry`); its session time-out bounds how long its requests may be held while
its identity is blocked (:mod:`workers.gateway.routing.holds`). Learnt from JoinGroup answers; a member that
joined through another gateway of a pair, or before this one started, is looked up when it commits or
heartbeats after a switch (see ``GroupHandling.find_member``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Member:
    cluster: str
    session_timeout_s: float | None
    """None: not seen joining (looked up), so not known."""
    left: bool = False
    """The gateway has had the cluster it joined on forget it (``GroupHandling.moved``)."""
    cut: bool = False
    """Its JoinGroup was answered early and still waits at the broker: the gateway removes it once the
    broker answers (``GroupHandling.leave_once_joined``), not before: until then the broker may make it
    the round's leader, and only a leader's SyncGroup ends a round."""
    rejoining: bool = False
    """Its client has asked to join the group again, on another cluster: told to rejoin once more (a
    Heartbeat of the old membership sent meanwhile), it would rebalance again after (``QUIET``)."""


class Members:
    """A bounded table: the oldest entries go first (members come and go with every client restart)."""

    def __init__(self, most: int = 100_000) -> None:
        self._most = most
        self._members: dict[tuple[str, str], Member] = {}

    def joined(self, group: str, member_id: str, member: Member) -> None:
        self._members.pop((group, member_id), None)
        self._members[(group, member_id)] = member
        while len(self._members) > self._most:
            del self._members[next(iter(self._members))]

    def get(self, group: str, member_id: str | None) -> Member | None:
        return self._members.get((group, member_id)) if member_id else None
