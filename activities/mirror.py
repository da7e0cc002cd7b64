"""Saga steps about the copy: the fence on the source, draining the link, carrying group offsets,
checking the copy, and what an unplanned failover lost (making and reversing links: activities/links.py).

The target is the truth about how far the copy got (only the mirror writes it), so draining compares
the target's exact ends with the source's, through the offset map, instead of waiting for the mirror's
next status report. Where the source ends in offsets no record holds (transaction markers), the
mirror's own report of how far it read says the rest.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from confluent_kafka import ConsumerGroupState, KafkaException
from temporalio import activity

from activities.deps import Deps, Key
from activities.fence import stood_still
from activities.pulse import beat
from activities.recorded import step
from switchyard.admins import Admins, ClusterAdmin
from switchyard.errors import CopyDiverged, CopyFailed, DrainTimeout, GroupActive
from switchyard.keys import BindingKey
from switchyard.mirror.groups import (
    about,
    committed_offsets,
    ends_at_flip,
    group_state,
    idle,
    sync_groups,
)
from switchyard.mirror.offsets import OffsetMap
from switchyard.mirror.status import drain_report, read_status
from switchyard.mirror.writers import GroupWriters
from switchyard.sagas import steps
from switchyard.sagas.requests import PartitionLoss
from switchyard.sagas.steps import (
    CopyChecked,
    CopyCheckRequest,
    Drained,
    DrainRequest,
    Fence,
    FenceRequest,
    GroupsSynced,
    GroupSyncRequest,
    Loss,
    LossRequest,
    PartitionEnd,
)
from switchyard.stopwatch import Stopwatch
from switchyard.threads import at_once
from switchyard.topic_copies import follow_settings
from switchyard.usage import groups_of, read_usage

log = logging.getLogger(__name__)
_DRAIN_POLL_S = 0.05
_LONG_AGO = datetime.min.replace(tzinfo=UTC)
_MAPS_AGE_S = 2.0
_SLOW_DRAIN_S = 5.0
"""A drain longer than this logs where its time went (clients are held meanwhile)."""
T = TypeVar("T")


class MirrorActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @step(steps.FENCE)
    def verify_fence(self, request: FenceRequest) -> Fence:
        """The source's ends, read after the block, must stand still through a fixed window (sagas started
        before the flip closed the window themselves: ``workflows/planned.py``)."""
        link = self.deps.link(request.link)
        first = self.deps.ends(link.source, [(p.topic, p.partition) for p in request.partitions])
        time.sleep(request.window_s)
        beat("the source's ends read twice")
        second = stood_still(self.deps, link.source, first)
        return Fence([PartitionEnd(t, p, e) for (t, p), e in sorted(second.items())])

    @step(steps.DRAIN, held=True)
    def drain_link(self, request: DrainRequest) -> Drained:
        """Wait until the target holds everything below the fenced source ends (heartbeating the lag)."""
        link = self.deps.link(request.link)
        wanted = {(e.topic, e.partition): e.end for e in request.ends} or self.deps.ends(
            link.source, [(p.topic, p.partition) for p in request.partitions]
        )
        since = datetime.now(UTC)
        deadline = time.monotonic() + request.timeout_s
        maps: dict[Key, OffsetMap] = {}
        maps_read = 0.0
        topics = sorted({t for t, _ in wanted})
        settings = threading.Thread(  # beside the wait, not after it: clients are held meanwhile
            target=contextvars.copy_context().run, daemon=True, name=f"follow-settings-{link.id}",
            args=(self._follow_settings, link.id, link.source, link.target, topics),
        )  # fmt: skip
        settings.start()
        spent = Stopwatch()
        while True:
            if time.monotonic() - maps_read > _MAPS_AGE_S:  # gaps may add segments while it drains
                with spent.part("reading the offset map"):
                    maps, maps_read = self.deps.link_records(link.target, link.id).maps, time.monotonic()
            with spent.part("reading the target's ends"):
                ends = self.deps.ends(link.target, wanted)
            behind = {
                k: end for k, end in wanted.items() if maps.get(k, OffsetMap()).next_source(ends[k]) < end
            }
            if behind:
                with spent.part("reading the mirror's report"):
                    behind = self._read_past_markers(link.id, behind, since)
            if not behind:
                with spent.part("following the topics' settings"):
                    settings.join(max(0.0, deadline - time.monotonic()))
                if spent.total() > _SLOW_DRAIN_S:
                    log.info("link %s drained in %s", link.id, spent)
                return Drained(
                    [PartitionEnd(t, p, e) for (t, p), e in sorted(ends.items())], sum(ends.values()),
                    [PartitionEnd(t, p, e) for (t, p), e in sorted(wanted.items())],
                )  # fmt: skip
            lag = {
                f"{t}[{p}]": end - maps.get((t, p), OffsetMap()).next_source(ends[(t, p)])
                for (t, p), end in behind.items()
            }
            beat({"partitions": len(wanted), "behind": len(behind), "lag": dict(list(lag.items())[:20])})
            if time.monotonic() > deadline:
                named = ", ".join(f"{k} ({n} records)" for k, n in list(lag.items())[:10])
                raise DrainTimeout(
                    f"link {link.id} did not copy up to the fenced ends in {request.timeout_s:g}s: {named} "
                    f"({spent})"
                )
            with spent.part("waiting for the copy"):
                time.sleep(_DRAIN_POLL_S)

    def _follow_settings(self, link_id: str, source: str, target: str, topics: list[str]) -> None:
        """The copies' settings brought in line with the source's, as the mirror does only every
        ``mirror.settings_refresh_s``: a retention changed on the source just before the switch would
        otherwise be missing on the target and, copied back by the reverse link, undone on the source.
        The records matter more: a setting that cannot be set is named, and the switch goes on."""
        try:
            followed = self.deps.admins.retried(
                (source, target), lambda clients, _: follow_settings(clients[0], clients[1], topics)
            )
        except (KafkaException, TimeoutError) as exc:
            followed = dict.fromkeys(topics, f"settings not read: {exc}")
        for topic, why in sorted(followed.items()):
            if why is not None:
                log.warning("link %s: topic %s: %s", link_id, topic, why)
                beat(f"topic {topic}: {why}")

    def _read_past_markers(self, link_id: str, behind: dict[Key, int], since: datetime) -> dict[Key, int]:
        """Those of ``behind`` the mirror has not read up to, by its own report made after ``since``: the
        offsets left may be transaction markers, which take source offsets and no target ones. A
        partition whose copy stopped with an error (``CopyFailed``) abandons the switch at once. Where
        several processes show a partition (one that stopped it, and one that took it over since), the
        latest to fetch it speaks for it."""
        reported = drain_report(
            self.deps.zk, self.deps.store.layout, link_id, since=since, partitions=behind
        ).partitions
        failed = [f"{t}[{p}]: {s.error}" for (t, p) in behind if (s := reported.get((t, p))) and s.error]
        if failed:  # stopped for good: waiting out the time-out would only hold clients longer
            raise CopyFailed(f"link {link_id} stopped copying {'; '.join(failed[:5])}")
        still = {}
        for key, end in behind.items():
            status = reported.get(key)
            fresh = status is not None and status.fetched_at is not None and status.fetched_at >= since
            if not (fresh and status is not None and status.mirrored >= end):
                still[key] = end
        return still

    @step(steps.SYNC_GROUPS, held=True)
    def sync_groups(self, request: GroupSyncRequest) -> GroupsSynced:
        """The keys' groups' committed offsets, carried to the target through the map (after the drain),
        and no other group's: one the switch does not move never holds it up. Each waits until it is
        idle on the target (members left there by an earlier switch expire after their session
        timeout), or the switch is abandoned naming it."""
        groups = sorted(set(request.groups) | self._groups_seen_since_the_plan(request.keys))
        if not groups:
            return GroupsSynced(0, 0)
        link = self.deps.link(request.link)
        self._wait_idle(link.target, groups, request.idle_timeout_s)
        records = self.deps.link_records(link.target, link.id)
        info = activity.info()
        writer = f"saga {info.workflow_id} {info.workflow_run_id}"  # a later run on the same keys is another
        writers = GroupWriters(self.deps.zk, self.deps.store.layout, link.id, writer)
        # a carry the mirror began before the saga's lock ends first; a turn this saga's own earlier
        # attempt died holding ends now (a local step's attempts all count as first: one run again on
        # another worker, its first died with the worker, is one)
        with writers.turn(after_own_attempt=info.attempt > 1 or info.is_local):
            report = self.deps.admins.retried(
                (link.source, link.target),
                lambda clients, timeout_s: sync_groups(
                    clients[0],
                    clients[1],
                    link.copies,
                    records.maps,
                    groups=groups,
                    timeout_s=timeout_s,
                    rewind=request.rewind,
                    flipped=ends_at_flip(link, records),
                ),
            )
        return GroupsSynced(len(report.written), report.unchanged, report.skipped, report.in_step)

    def _groups_seen_since_the_plan(self, keys: list[str]) -> set[str]:
        """The groups the gateways report ``keys`` using now: every gateway published what it saw before
        it acknowledged the block, so this includes a group whose consumers started after the plan read
        the reports, or just before it (a gateway writes what is new at most every
        ``gateway.usage_publish_s``)."""
        if not keys:
            return set()
        deps = self.deps
        uses = read_usage(deps.zk, deps.store.layout, within_s=deps.config.gateway.usage_window_s)
        return groups_of(uses, [BindingKey.parse(k) for k in keys])

    def _wait_idle(self, cluster: str, groups: list[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:

            def state(group: str) -> tuple[ConsumerGroupState, int]:
                with about(group):
                    return _of_group(self.deps.admins, cluster, group_state, group)

            states = dict(zip(groups, at_once(state, groups), strict=True))
            active = {g: s for g, s in states.items() if not idle(*s)}
            if not active:
                return
            named = ", ".join(f"{g} ({n} members, {s.name})" for g, (s, n) in sorted(active.items()))
            if time.monotonic() > deadline:
                raise GroupActive(
                    f"still active on {cluster} after {timeout_s:g}s: {named}; carrying their offsets "
                    "would overwrite what their members commit there"
                )
            beat(f"waiting for groups to be idle on {cluster}: {named}")
            time.sleep(0.5)

    @step(steps.CHECK_COPY, held=True)
    def check_copy(self, request: CopyCheckRequest) -> CopyChecked:
        """The last gate before the flip: the source still ends where it was fenced, the target holds
        exactly what was copied up to there — no more (nothing else wrote to it), no fewer (a record not
        copied yet would be lost at the flip) — and the groups read the same records."""
        link = self.deps.link(request.link)
        keys = {(e.topic, e.partition): e.end for e in request.ends}
        target = self.deps.ends(link.target, keys)
        maps = self.deps.link_records(link.target, link.id).maps
        problems = []
        expected = {k: maps.get(k, OffsetMap()).position(fenced) for k, fenced in keys.items()}
        short = {k: keys[k] for k in keys if target[k] < expected[k]}
        if short:  # unless what is missing is transaction markers, which take no target offset
            short = self._read_past_markers(link.id, short, _since(request.since))
        for t, p in sorted(keys):
            held, copied = target[(t, p)], expected[(t, p)]
            if held > copied:
                problems.append(f"{t}[{p}]: the target holds {held}, more than the {copied} copied")
            elif (t, p) in short:
                problems.append(f"{t}[{p}]: the target holds {held}, fewer than the {copied} to copy")
        problems += self._groups_differ(link.source, link.target, maps, target, request.groups)
        if problems or not request.fenced_at_flip:  # the fence's window is open: no record may land there
            stood_still(self.deps, link.source, keys)  # (a writer around the gateway, named so, if one did)
        if problems:
            raise CopyDiverged(f"link {link.id}: {'; '.join(problems[:10])}")
        return CopyChecked("clean")

    def _groups_differ(
        self, source: str, target: str, maps: dict[Key, OffsetMap], ends: dict[Key, int], groups: list[str]
    ) -> list[str]:
        """How the groups' offsets on the target differ from the source's, translated (within the
        target's ``ends``: see ``sync_groups``)."""
        admins = self.deps.admins

        def offsets(asked: tuple[str, str]) -> dict[Key, int]:
            cluster, group = asked
            with about(group):
                return _of_group(admins, cluster, committed_offsets, group)

        read = at_once(offsets, [(cluster, g) for g in groups for cluster in (target, source)])
        found = []
        for group, theirs, ours in zip(groups, read[::2], read[1::2], strict=True):
            for key, offset in ours.items():
                if key not in ends or offset < 0:
                    continue
                expected = maps.get(key, OffsetMap()).position(offset, ends[key])
                if theirs.get(key) != expected:
                    where = f"{key[0]}[{key[1]}]"
                    found.append(
                        f"group {group} {where}: at {theirs.get(key)} on the target, {expected} expected"
                    )
        return found

    @step(steps.MEASURE_LOSS)
    def measure_loss(self, request: LossRequest) -> Loss:
        """Failover: per partition, the source's end as the mirror last saw it, against how far the copy
        got — the records the source acknowledged that the target never got (at least these)."""
        seen: dict[Key, int] = {}
        for member in read_status(self.deps.zk, self.deps.store.layout, request.link):
            for s in member.partitions:
                seen[(s.topic, s.partition)] = max(seen.get((s.topic, s.partition), -1), s.source_end)
        return Loss(
            [
                PartitionLoss(
                    f.topic, f.partition, max(seen.get((f.topic, f.partition), f.end), f.end), f.end
                )
                for f in request.final
            ]
        )


def _since(when: str) -> datetime:
    return datetime.fromisoformat(when) if when else _LONG_AGO


def _of_group(admins: Admins, cluster: str, read: Callable[[ClusterAdmin, str, float], T], group: str) -> T:
    """What ``read`` says of ``group`` on ``cluster`` (``Admins.retried``: a stale client costs 2 s)."""
    return admins.retried((cluster,), lambda clients, timeout_s: read(clients[0], group, timeout_s))
