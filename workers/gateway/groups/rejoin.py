"""A consumer (re)joining its group, as one connection sees it: what a commit sent meanwhile may wait for.

The connection that sends the join keeps it (:class:`workers.gateway.groups.handling.GroupHandling`);
once the join is answered, the process's other connections find it by the member id it was given
(``Members.rejoin_of``): kafkajs commits on its old coordinator's connection while it joins on the new
coordinator's.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any


@dataclasses.dataclass
class Rejoin:
    """A connection's consumer (re)joining a group."""

    joined: asyncio.Future[tuple[str, int]]
    """Set to (member id, generation) by the successful SyncGroup that ends the join."""
    again: asyncio.Future[None]
    """Set when an answer sends the client to join again (``refused``)."""
    session_s: float
    """The session time-out the join asked for."""
    entered: bool = False
    """A JoinGroup of it was sent that makes the member one of the group at once (``_enters``), not just
    one asking for a member id, and no answer since sent the client to join again: the client does not
    wait for a commit's answer to finish the join."""
    asked_as: str = ""
    """The member id the client's entering JoinGroup named (it may have gone to the broker as another)."""
    given: tuple[str, int] | None = None
    """The member id and generation its JoinGroup was answered with, its SyncGroup still to come."""
    assigned: frozenset[tuple[str, int]] | None = None
    """The partitions the SyncGroup that ended it assigned (None: not told in the consumer protocol's
    terms)."""
    waited_out: bool = False
    """A commit waited a held request's whole hold for its sync, which did not come: the client's sync
    waits on something else, and a commit sent again would wait as long for nothing. kafkajs's group
    leader, its assignment's Metadata lost with a connection, resent its old generation's commit four
    times, each held 10 s (a chaos trial); the commits after the first go as they came."""

    def passed(self, member_id: str, generation: int) -> bool:
        """Whether a commit of ``member_id`` at ``generation`` is of a generation this join has passed,
        for the same member: the broker refuses it (ILLEGAL_GENERATION) until the join's sync is done.
        kafkajs commits with the generation of its last sync while its next join waits for its own: a
        chaos trial's commits were refused so three times, and the records processed again."""
        return self.given is not None and self.given[0] == member_id and generation < self.given[1]

    def ahead_of(self, member_id: str) -> bool:
        """Whether a commit of ``member_id`` comes behind this join, which the client sent as that member
        and is not answered yet: the broker takes it only once the join is answered (a connection's
        requests are read one at a time), in the generation the join makes, and refuses it
        (ILLEGAL_GENERATION) where that is a new one. kafkajs rejoined with a commit behind its join,
        refused 3 ms after the join's answer (a chaos trial)."""
        return self.entered and self.given is None and bool(member_id) and member_id == self.asked_as

    def owns(self, commit: Any) -> bool:
        """Whether the sync that ended the join assigned every partition ``commit`` names to its member:
        a commit made in an earlier generation goes as this one's only then, or it would overwrite what
        another member, given one of them, commits."""
        return self.assigned is not None and commit_partitions(commit) <= self.assigned

    def refused(self) -> None:
        """A JoinGroup or SyncGroup of it was refused: the client joins again. A commit coming now must
        not wait for a join it sends after, nor one waiting already: if that join goes on this
        connection, its answer queues behind the commit's."""
        self.entered = False
        self.given = None
        self.waited_out = False
        if not self.again.done():
            self.again.set_result(None)
        self.again = asyncio.get_running_loop().create_future()


def commit_partitions(commit: Any) -> set[tuple[str, int]]:
    """The (topic, partition) pairs an OffsetCommit's ``commit`` body names."""
    return {(t.name, p.partition_index) for t in commit.topics for p in t.partitions}
