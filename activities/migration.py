"""Topic migration's own steps: who uses the topic, copying it to the target until the copy keeps up,
and retiring what is left on the source once an operator says so."""

from __future__ import annotations

import re
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from activities.deps import Deps
from activities.links import caught_up
from activities.pulse import beat
from activities.recorded import step
from switchyard import kafka
from switchyard.errors import BindingRefused, CopyFailed
from switchyard.keys import BindingKey, KeyKind
from switchyard.mirror.control import delete_link
from switchyard.mirror.groups import group_state
from switchyard.mirror.status import read_status
from switchyard.model import Link, LinkState
from switchyard.moves.topic import find_users
from switchyard.sagas import steps
from switchyard.sagas.steps import (
    MigrationLink,
    MigrationLinkRequest,
    Retired,
    RetireRequest,
    TopicUsers,
    UsersRequest,
)

_POLL_S = 0.5
_STEADY_S = 2.0
"""A moved group's members on the target are all back once their number holds this long."""


class MigrationActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @step(steps.TOPIC_USERS)
    def topic_users(self, request: UsersRequest) -> TopicUsers:
        return find_users(self.deps.store, self.deps.config, request)

    @step(steps.PREPARE_MIGRATION)
    def prepare_migration(self, request: MigrationLinkRequest) -> MigrationLink:
        """Make the link that copies exactly the topic (a retry finds it made), then wait, heartbeating
        how far the copy got, until every partition keeps up with the source."""
        link = self._link(request)
        return caught_up(self.deps, link, request.topic, request.caught_up_s, request.timeout_s)

    def _link(self, request: MigrationLinkRequest) -> Link:
        wanted = (request.source, request.target, (re.escape(request.topic),), ())
        existing = self.deps.store.link(request.link)
        if existing is None:
            self.deps.store.create_link(
                request.link, request.source, request.target, include=wanted[2],
                actor=f"saga:{request.saga_id}", reason=f"topic migration: copy {request.topic}",
            )  # fmt: skip
            existing = self.deps.link(request.link)
        if (existing.source, existing.target, existing.include, existing.exclude) != wanted:
            raise BindingRefused(f"link {request.link} exists and copies something else: {existing}")
        if existing.state is not LinkState.RUNNING:
            raise BindingRefused(f"link {request.link} is {existing.state}: it must run to catch up")
        return existing

    @step(steps.RETIRE_TOPIC)
    def retire_topic(self, request: RetireRequest) -> Retired:
        """Remove the migration's links, wait until no mirror copies them, then delete the topic on the
        cluster it left; each part is skipped when a retry finds it done."""
        actor, why = f"saga:{request.saga_id}", f"topic migration: {request.topic} retired"
        self._until_rejoined(request)
        removed = remove_links(self.deps, request.links, actor=actor, reason=why)
        deleted = False
        if request.delete_topic:
            deleted = kafka.delete_topic(self.deps.bootstrap(request.cluster), request.topic)
        return Retired(removed, deleted)

    def _until_rejoined(self, request: RetireRequest) -> None:
        """Until each group the migration moved has members on the target, their number unchanged for
        ``_STEADY_S``, at most ``settle_s``: a member that joined on the source commits there until it
        rejoins (a KIP-848 member at its own next heartbeat, up to 5 s after the flip), and the gateways
        carry those commits through the link. Removed first, the commit went on unconverted and was
        refused (a chaos trial: UNKNOWN_MEMBER_ID, its batch processed again). A group that stays
        empty (no one reads it now), or a target that cannot say, waits it out."""
        link = next((found for name in request.links if (found := self.deps.store.link(name))), None)
        groups = [key.name for key in map(BindingKey.parse, request.keys) if key.kind is KeyKind.GROUP]
        if link is None or not groups:
            return
        target = link.target if link.source == request.cluster else link.source
        admin = AdminClient({"bootstrap.servers": self.deps.bootstrap(target)})
        deadline = time.monotonic() + request.settle_s
        seen: dict[str, tuple[int, float]] = {}
        """Per group: its members on the target, and since when that many."""
        waiting = [group for group in groups if group]
        while waiting and time.monotonic() < deadline:
            for group in waiting:
                try:
                    members = group_state(admin, group)[1]
                except (KafkaException, TimeoutError):
                    members = 0
                if seen.get(group, (None, 0.0))[0] != members:
                    seen[group] = (members, time.monotonic())
            waiting = [g for g in waiting if not seen[g][0] or time.monotonic() - seen[g][1] < _STEADY_S]
            if waiting:
                beat(f"waiting for {', '.join(waiting)} to settle on {target} before the links go")
                time.sleep(_POLL_S)


def remove_links(deps: Deps, links: list[str], *, actor: str, reason: str) -> list[str]:
    """Remove those of ``links`` still there (a retry finds some gone) and wait until no mirror process
    copies any; the ones removed now."""
    removed = []
    for link_id in links:
        if deps.store.link(link_id) is not None:
            delete_link(deps.config, deps.store, link_id, actor=actor, reason=reason, force=True)
            removed.append(link_id)
    wait_unfollowed(deps, links)
    return removed


def wait_unfollowed(deps: Deps, links: list[str], timeout_s: float = 60.0) -> None:
    """Until no mirror process copies ``links`` (removed): a copier still writing into a topic as it is
    deleted could create it anew."""
    deadline = time.monotonic() + timeout_s
    while any(read_status(deps.zk, deps.store.layout, link) for link in links):
        if time.monotonic() > deadline:
            raise CopyFailed(f"mirror processes still copy {', '.join(links)} {timeout_s:g}s after removal")
        beat("waiting for the mirror processes to stop copying the removed links")
        time.sleep(_POLL_S)
