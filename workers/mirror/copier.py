"""Copying one link: consume the source, produce each record to the same partition of the target.

The target is the truth about how far the copy got. Only the mirror writes a target partition (the
gateway refuses clients' Produce to it until the link is promoted), so when a partition is assigned, its
target log end T says everything: T = 0 means start from the source's beginning; otherwise the record at
T - 1 came from source offset ``map.source_of(T - 1)`` and copying resumes right after it. A crash loses
nothing and repeats nothing, without any committed consumer offset.

Every record lands at a target offset the mirror predicts; the delivery report of the last record of
each partition in each batch read must confirm it, or the partition stops with an error (someone else
wrote to the target). One report per batch covers every record before it: the producer is idempotent,
so the target takes a partition's records only in order, and gapless, so a record it cannot deliver
stops the producer (a fatal error) rather than leave a gap. Reports for every record would cost the
copy a Python call and a copy of the record each. When the source skips offsets (a
transaction marker, compaction), a segment is added to the offset map *before* the record after the gap
is written: a batch's segments are stored together, acknowledged with everything written before them,
and only then are the records after them written, so the stored map always covers the target. A copy
cut off in between leaves segments past the target's end, which the partition's next take-up removes.
Records are read ``read_committed`` and written by one idempotent producer, which keeps each partition
in order and never duplicates a retried batch; no transactions (their markers would take target
offsets and break identical offsets).

Partitions are shared through a consumer group on the source (``switchyard-mirror.<link>``): several
mirror processes split a link, and a dead one's partitions move to the others, which resume from the
target as above. Before giving partitions away a process waits for its writes to them to be
acknowledged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping
from functools import partial
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from switchyard import kafka
from switchyard.admins import Admins
from switchyard.config import Config
from switchyard.mirror.mapstore import MAP_TOPIC, ensure_map_topic, read_maps, segment_record
from switchyard.mirror.offsets import OffsetMap
from switchyard.mirror.status import PartitionStatus
from switchyard.model import Link, LinkState
from switchyard.routing.layout import Layout
from workers.mirror.acls import sync_acls
from workers.mirror.carry import GroupCarry
from workers.mirror.clients import LEAVE_WAIT_S, CopyClients, group_id
from workers.mirror.progress import Key, PartitionCopy, gone
from workers.mirror.reporting import SourceEnds, StatusNode
from workers.mirror.topics import grow_copies, partition_counts, sync_topics
from workers.mirror.watch import SessionWatch, is_member

log = logging.getLogger(__name__)
_BACKOFF_MAX_S = 30.0
_IDLE_WAIT_S = 0.1
"""A link with no topic to copy looks again this often (pause, promotion, stop; topics every refresh)."""
_SLOW_REFRESH_S = 5.0
"""A topic listing (with settings and ACLs) slower than this is logged: the copy loop waits for it, and
a session that times out meanwhile rejoins its group only after it."""


class Waiting:
    """The segments a batch needs and the runs that wait for them to be stored (``LinkCopier._copy``)."""

    def __init__(self) -> None:
        self.segments: list[tuple[PartitionCopy, int, int]] = []
        """Per segment: its partition, and the source and target offsets it starts at."""
        self.partitions: Counter[Key] = Counter()
        """Those with a segment here, and how many: each of their runs from the first on waits."""
        self.runs: list[tuple[int, PartitionCopy, list[Message], int]] = []
        """Per run: which of its partition's segments here it belongs to, its partition, its records,
        and the target offset of the last one."""

    def segment(self, st: PartitionCopy, source: int) -> None:
        """A segment starting at ``source``, where the partition's next record goes: in the map at once
        (its next runs follow it), stored with the rest of the batch's."""
        st.offset_map.add(source, st.next_target)
        self.segments.append((st, source, st.next_target))
        self.partitions[(st.topic, st.partition)] += 1

    def wait(self, st: PartitionCopy, records: list[Message], target: int) -> None:
        """A run kept until the segments are stored."""
        self.runs.append((self.partitions[(st.topic, st.partition)], st, records, target))

    def rounds(self) -> list[list[tuple[PartitionCopy, list[Message], int]]]:
        """The runs in rounds: each partition's first segment's runs in the first, its second's in the
        second, and so on, each partition's in order."""
        rounds: list[list[tuple[PartitionCopy, list[Message], int]]] = []
        for number, st, records, target in self.runs:
            while len(rounds) < number:
                rounds.append([])
            rounds[number - 1].append((st, records, target))
        return rounds


class MirrorError(Exception):
    """The copy of a link cannot go on in this session; the session restarts from the target's truth."""


class LinkCopier:
    """One link on this process: a thread that copies until stopped, or until the link is promoted."""

    def __init__(self, config: Config, link: Link, zk: KazooClient, layout: Layout, member: str) -> None:
        self.config = config
        self._wanted = link
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"mirror-{link.id}", daemon=True)
        self._partitions: dict[Key, PartitionCopy] = {}
        self._failed: dict[Key, str] = {}
        """Partitions that must not be copied further (diverged target, vanished source) until restart."""
        self._failure: str | None = None
        self._link_error: str | None = None
        self._notes: dict[str, str] = {}
        self._listed_epoch = 0
        """The link's epoch when its topics were last listed and subscribed to (see MemberStatus)."""
        """What the target refused of the source's topics while their records are copied: topic
        settings (per topic, from its creation by this process) and ACLs (key "acls", from the latest
        refresh)."""
        self._paused = False
        self._clients: CopyClients | None = None
        self._admins: Admins | None = None
        """This session's admin clients."""
        self._maps: dict[Key, OffsetMap] = {}
        self._target = ""
        """The target's bootstrap, in this session."""
        self._final: dict[Key, PartitionCopy] = {}
        self._left: dict[Key, PartitionCopy] = {}
        """The partitions given up (revoked, lost, or the session ended), as last seen: shown until the
        group next gives this process partitions. A source cluster gone away takes a session's partitions
        and ends it, and the next session can take nothing up; what the mirror last saw of the source is
        then what a failover measures its loss by."""
        self._publish_due = threading.Event()
        """Set when the status is due; each session has its own (see _session)."""
        self.finished = threading.Event()
        """Set when the link was promoted and this copier's last writes are acknowledged."""
        self.source = SourceEnds(self._partitions)
        self.status = StatusNode(zk, layout, member, lambda: self.link.id, self._current)
        self.carry = GroupCarry(
            zk, layout, member, lambda: self.link, lambda: dict(self._partitions),
            principals=self._principals, note=self._note,
        )  # fmt: skip
        self.member = member

    @property
    def link(self) -> Link:
        return self._wanted

    def start(self) -> None:
        self._thread.start()

    def update(self, link: Link) -> None:
        self._wanted = link

    def statuses(self) -> list[PartitionStatus]:
        """The current status of every partition this copier holds (for metrics; any thread)."""
        now = time.time()
        state = "promoted" if self.finished.is_set() else "paused" if self._paused else "copying"
        shown = self._final if self.finished.is_set() else self._last_seen()
        return [st.status(state, now) for _, st in sorted(dict(shown).items())]

    def _last_seen(self) -> dict[Key, PartitionCopy]:
        """Every partition as last seen: held by this session, or let go since the last one held it."""
        return {**self._left, **self._partitions}

    def _current(self) -> tuple[list[PartitionStatus], str | None, tuple[str, ...], int]:
        notes = tuple(v for _, v in sorted(dict(self._notes).items()))
        return self.statuses(), self._link_error, notes, self._listed_epoch

    def stop(self, timeout_s: float = 30.0, *, forget: bool = False) -> None:
        """End the copy; ``forget`` (the link was removed) also takes a promoted link's final status
        down, which otherwise stays up to show where the copy ended."""
        self.request_stop()
        self._thread.join(timeout_s)
        if forget:
            self.status.retire()

    def request_stop(self) -> None:
        """Ask the copy to end (``stop`` waits for it); several copiers can then end side by side."""
        self._stop.set()

    # ---- the session loop

    def _run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set() and not self.finished.is_set():
            try:
                self._session()
                backoff = 1.0
            except Exception as exc:  # a broken session must not end the process: retry from the truth
                self._link_error = f"{exc} (retrying in {backoff:.0f} s)"
                log.warning("link %s: %s", self.link.id, self._link_error)
                self.status.publish()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
        self.status.publish()
        if not self.finished.is_set():
            self.status.retire()

    def _session(self) -> None:
        link, settings = self.link, self.config.mirror
        if link.problem is not None:
            raise MirrorError(f"invalid link, nothing is copied: {link.problem}")
        source = self.config.clusters[link.source].bootstrap
        target = self.config.clusters[link.target].bootstrap
        self._failure = None
        self._admins = admins = Admins(lambda cluster: self.config.clusters[cluster].bootstrap)
        ensure_map_topic(admins.get(link.target))
        self._maps = read_maps(target, link.id)
        self._target = target
        self._clients = clients = CopyClients.connect(
            settings, link.id, self.member, source=source, target=target, stats=self.source.from_stats
        )
        consumer, producer = clients.consumer, clients.producer
        topics: list[str] = []
        next_refresh = next_status = next_settings = 0.0
        session_over = threading.Event()
        self._publish_due = due = threading.Event()  # this session's: a late publisher never takes it
        watch = SessionWatch(link.id, self._thread)
        helpers = [
            threading.Thread(target=target, args=args, name=f"mirror-{name}-{link.id}", daemon=True)
            for name, target, args in (
                # off the copy loop: listing a source's groups can take long; a ZooKeeper write waits
                ("groups", self.carry.every, (settings.group_sync_interval_s, admins, session_over)),
                ("status", self.status.when_due, (due, session_over)),
                ("watch", watch.watch, (session_over,)),
            )
        ]
        for helper in helpers:
            helper.start()
        try:
            while not self._stop.is_set():
                now = time.time()
                watch.turned()
                if self.link.state is LinkState.PROMOTED:
                    self._finish()
                    return
                if now >= next_refresh:
                    follow = now >= next_settings
                    listed = self.link  # the link the topics are listed under, whatever changes meanwhile
                    found = self._refresh(listed, admins.get(link.source), admins.get(link.target), follow)
                    next_settings = now + settings.settings_refresh_s if follow else next_settings
                    if found != topics:
                        topics = found
                        self._subscribe(consumer, topics)
                    self._listed_epoch = listed.epoch
                    next_refresh = now + settings.topic_refresh_s
                    self._link_error = None
                self._follow_pause()
                self._copy_arrived(bool(topics))
                producer.poll(0)
                if self._failure:
                    raise MirrorError(self._failure)
                if now >= next_status:
                    self._status_due(watch, admins, bool(topics), now)
                    next_status = now + settings.status_interval_s
        finally:
            session_over.set()
            due.set()
            for helper in helpers:  # before the session's last status, which _run publishes
                helper.join(LEAVE_WAIT_S if self._stop.is_set() else 30)  # a stopping process waits little
            self._close()

    def _status_due(self, watch: SessionWatch, admins: Admins, subscribed: bool, now: float) -> None:
        """Every status interval: the source's ends read while paused (nothing is fetched then); a
        member that has held nothing for a while and that its group does not list ends the session, so
        that the next one joins with a new consumer (``workers/mirror/watch.py``)."""
        assert self._clients is not None
        consumer = self._clients.consumer
        if self._paused:
            self.source.read(self._clients.source_probe, self.link.id)
        elif (
            watch.ask_group(bool(self._partitions), subscribed, now)
            and is_member(admins, self.link.source, group_id(self.link.id), consumer.memberid()) is False
        ):
            raise MirrorError("its group has not taken this process back since its session ended")
        self._publish_due.set()

    def _subscribe(self, consumer: Consumer, topics: list[str]) -> None:
        """Copy ``topics`` from now on; none left (a split moved them to a link of their own): none."""
        if topics:
            consumer.subscribe(
                topics, on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked
            )
        else:  # nothing polls the consumer from now on to serve its revocation: let go here
            consumer.unsubscribe()
            self._revoked(consumer, [TopicPartition(t, p) for t, p in self._partitions])
            self._left = {}  # it holds nothing, and shows nothing
        log.info("link %s: copying %d topics", self.link.id, len(topics))

    def _refresh(self, link: Link, source: AdminClient, target: AdminClient, follow: bool) -> list[str]:
        """The topics ``link`` copies, their copies on the target created (their settings brought in
        line when ``follow``), and their ACLs there brought in line."""
        began = time.monotonic()
        found, notes = sync_topics(link, source, target, self._stop, follow=follow)
        self.source.answered()
        for key, note in notes.items():
            self._note(key, note)
        self._note("acls", sync_acls(source, target, found, self._principals(link)) if found else None)
        if (took := time.monotonic() - began) > _SLOW_REFRESH_S:  # nothing was copied meanwhile
            log.warning("link %s: listing its topics took %.1fs (copying waited)", link.id, took)
        return found

    def _principals(self, link: Link) -> Mapping[str, str]:
        """Each principal of the link's source named as the target knows it (``mirror.principals``)."""
        return self.config.mirror.principal_names(link.source, link.target)

    def _note(self, key: str, note: str | None) -> None:
        if note is None:
            self._notes.pop(key, None)
        elif self._notes.get(key) != note:
            log.warning("link %s: %s", self.link.id, note)
            self._notes[key] = note

    def _copy_arrived(self, subscribed: bool) -> None:
        """Copy what has arrived; with nothing subscribed nothing else waits, so wait here: an idle link
        must not spin a core."""
        if not subscribed:
            self._stop.wait(_IDLE_WAIT_S)
            return
        self._copy(self._next_records())

    def _next_records(self) -> list[Message]:
        """What has arrived, at once; when nothing has, wait up to 0.1 s for the first record only."""
        assert self._clients is not None
        consumer = self._clients.consumer
        return consumer.consume(1000, 0) or consumer.consume(1, 0.1)

    def _finish(self) -> None:
        """Promoted: the last writes are acknowledged, the group is left, the status says so for good."""
        assert self._clients is not None
        remaining = self._clients.producer.flush(30)
        if remaining or self._failure:
            raise MirrorError(f"promoted, but {remaining} records were not acknowledged: {self._failure}")
        # the last status stays, for good: what was copied, the partitions let go included (a source
        # that froze took the group's session with it, and the failover measured its loss as nothing)
        self._final = self._last_seen()
        self.finished.set()
        log.info("link %s promoted: copying stopped", self.link.id)

    def _close(self) -> None:
        self._let_go(list(self._partitions))
        if self._clients is not None:
            self._clients.close(self.link.id, stopping=self._stop.is_set())
        self._clients = None

    def _let_go(self, keys: list[Key]) -> None:
        """This session holds these partitions no more; they are shown as last seen (``_left``)."""
        for key in keys:
            st = self._partitions.pop(key, None)
            if st is not None:
                self._left[key] = st

    # ---- partitions come and go

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Take up the partitions; a failure ends the session from the copy loop, not from inside the
        client's callback (an exception raised there reaches ``consume`` as something no ``except``
        clause catches, and ended the copy thread)."""
        try:
            self._take_up(consumer, partitions)
        except Exception as exc:
            self._failure = f"taking up {len(partitions)} partitions failed: {exc}"

    def _take_up(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        assert self._clients is not None
        assert self._admins is not None
        probe, source_probe = self._clients.probe, self._clients.source_probe
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self._left = {}  # the group has spoken: what this session holds is all this process shows
        fresh = [key for key in keys if key not in self._maps]  # new to the link, or to this session
        if keys:  # another process may have held them since this session read the maps, adding segments
            stored = read_maps(self._target, self.link.id)
            self._maps.update((key, stored[key]) for key in keys if key in stored)
        if fresh:  # added on the target before its ends are asked there
            grow_copies(self._admins.get(self.link.target), fresh)
            _await_partitions([probe, self._clients.producer, source_probe], fresh)
        ends = kafka.log_ends(probe, keys)
        source_ends = kafka.log_ends(source_probe, keys)
        starts = kafka.watermarks(source_probe, keys, timeout_s=10)
        vanished: list[tuple[Key, str]] = []
        ahead: list[tuple[Key, int, int]] = []
        for tp, key in zip(partitions, keys, strict=True):
            offset_map = self._maps.setdefault(key, OffsetMap())
            end = ends[key]
            ahead += [(key, s, t) for s, t in offset_map.drop_after(end)]
            start = offset_map.next_source(end)
            begun = end > 0 or bool(offset_map.segments)  # else: from wherever the source log starts
            tp.offset = start if begun else OFFSET_BEGINNING
            self._partitions[key] = PartitionCopy(
                key[0], key[1], offset_map, next_target=end, acked_target=end, start=start,
                read_to=start, begun=begun, source_end=source_ends[key], error=self._failed.get(key),
            )  # fmt: skip
            low = starts[key][0]
            if key not in self._failed and begun and not low <= start <= source_ends[key]:
                vanished.append((key, gone(start, low, source_ends[key])))
        if ahead:
            self._forget_ahead(ahead)
        consumer.assign(partitions)
        for key, reason in vanished:
            self._fail_partition(key, reason)
        held = [tp for tp in partitions if (tp.topic, tp.partition) in self._failed]
        if self._paused:
            held = partitions
        if held:
            consumer.pause(held)
        log.info("link %s: copying %s", self.link.id, ", ".join(f"{t}[{p}]@{ends[(t, p)]}" for t, p in keys))

    def _forget_ahead(self, ahead: list[tuple[Key, int, int]]) -> None:
        """Remove segments stored ahead of records that never reached the target (a copy cut off
        between storing a batch's segments and writing it): copying the same records again stores
        them again, and a map left holding them would refuse the segments of records that differ."""
        for (topic, partition), source, _ in ahead:
            record_key, _value = segment_record(self.link.id, topic, partition, source, 0)
            self._produce(MAP_TOPIC, None, record_key, on_delivery=self._map_delivered)
        self._acknowledged("segments ahead of the target not removed")
        log.info("link %s: %d segments stored ahead of records never written removed: %s", self.link.id,
                 len(ahead), ", ".join(f"{t}[{p}]@{s}->{tt}" for (t, p), s, tt in ahead[:5]))  # fmt: skip

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._clients is not None:
            self._clients.producer.flush(30)  # our writes land before another process resumes from the target
        self._let_go([(tp.topic, tp.partition) for tp in partitions])
        if partitions:
            log.info("link %s: %d partitions let go (the group's rebalance, or its session ended)",
                     self.link.id, len(partitions))  # fmt: skip

    def _follow_pause(self) -> None:
        assert self._clients is not None
        consumer = self._clients.consumer
        wanted = self.link.state is not LinkState.RUNNING  # a promoted link is never resumed
        if wanted == self._paused:
            return
        assignment = consumer.assignment()
        if wanted:
            consumer.pause(assignment)
            self._clients.producer.flush(30)  # what is on its way lands before the target is read as final
        else:
            running = [tp for tp in assignment if (tp.topic, tp.partition) not in self._failed]
            consumer.resume(running)
            for tp in running:  # read on exactly where the copy stands, whatever was prefetched
                st = self._partitions.get((tp.topic, tp.partition))
                if st is not None:
                    position = st.read_to if st.begun else OFFSET_BEGINNING
                    consumer.seek(TopicPartition(tp.topic, tp.partition, position))
        self._paused = wanted
        self._publish_due.set()  # at once: a promotion waits for this, with clients held
        log.info("link %s %s", self.link.id, "paused" if wanted else "resumed")

    # ---- records

    def _copy(self, batch: list[Message]) -> None:
        """Write ``batch`` to the target, each record to the same partition at the offset predicted.

        librdkafka hands records over in runs, a fetched batch of one partition at a time. A record that
        continues its run (same partition, the next source offset) takes the fast path: no lookup, no
        check, the run's previous record written without a report. Anything else — another partition, a
        gap in the source offsets, an event — ends the run: its last record is written asking for its
        report, and the partition's state is brought up to date, once per run rather than per record.

        A run after a gap needs a segment in the offset map, stored before any record of it is written.
        Its partition's runs then wait, and the batch's segments are stored together once it is read,
        in one round trip to the target (``_store_segments``; ``_write_runs`` then waits once per
        further gap in the partition with the most). A transactional topic has a gap at every commit,
        in every partition the transaction wrote: stored one at a time, each after its own wait for
        what came before, the copy took two round trips per gap and fell behind a producer committing
        back to back on a busy host (645 source offsets behind after a 60 s drain, in CI)."""
        if not batch or self.link.state is not LinkState.RUNNING:
            return  # paused or promoted since it was read: never written (a resume reads it again)
        assert self._clients is not None
        produce = self._clients.producer.produce
        st: PartitionCopy | None = None
        topic, part = "", -1
        pending: Message | None = None
        """The run's latest record: written once the next one comes, or with a report at the run's end."""
        follows = taken = 0
        """The source offset that continues the run; how many records the run has taken."""
        waiting = Waiting()
        """The batch's segments, and the runs that wait for them to be stored."""
        run: list[Message] | None = None
        """The run in progress's records before ``pending``, where it waits for segments."""
        for msg in batch:
            if (
                msg.error() is None
                and msg.partition() == part
                and msg.offset() == follows
                and msg.topic() == topic
            ):
                assert pending is not None  # a run has its first record
                if run is not None:
                    run.append(pending)
                else:
                    kind, stamp = pending.timestamp()
                    try:
                        produce(
                            topic, pending.value(), pending.key(), partition=part,
                            headers=pending.headers(),
                            timestamp=stamp if kind != TIMESTAMP_NOT_AVAILABLE else 0,
                        )  # fmt: skip
                    except BufferError:  # the target is slow or away: wait (reports are served meanwhile)
                        self._write((topic, part), pending, -1, report=False)
                        if st is not None and st.error:  # a report failed the partition: nothing more of it
                            st, pending, part = None, None, -1
                            continue
                pending, follows, taken = msg, follows + 1, taken + 1
                continue
            if st is not None and pending is not None:
                self._end_run(st, pending, taken, run, waiting)
                st, pending, part = None, None, -1
            st = self._run_start(msg, waiting)
            if st is not None:
                run = [] if (st.topic, st.partition) in waiting.partitions else None
                topic, part, pending, follows, taken = st.topic, st.partition, msg, (msg.offset() or 0) + 1, 1
        if st is not None and pending is not None:
            self._end_run(st, pending, taken, run, waiting)
        if waiting.segments:
            self._store_segments(waiting)
            self._write_runs(waiting)

    def _run_start(self, msg: Message, waiting: Waiting) -> PartitionCopy | None:
        """The partition whose run ``msg`` starts, its segment (after a gap) added to ``waiting``; None
        where it is not copied: an event, a partition not copied here, a record copied already."""
        key = (msg.topic() or "", msg.partition() or 0)
        error = msg.error()
        if error is not None:
            self._copy_error(key, self._partitions.get(key), error, msg)
            return None
        found = self._partitions.get(key)
        offset = msg.offset() or 0
        if found is None or found.error or offset < found.read_to:
            return None  # not copied here, or read again after a pause or a seek: already copied
        if offset != found.last_source + 1 and not found.offset_map.continues(offset, found.next_target):
            waiting.segment(found, offset)  # (right after a record that continued the map, this one does)
        return found

    def _end_run(
        self, st: PartitionCopy, last: Message, taken: int, run: list[Message] | None, waiting: Waiting
    ) -> None:
        """The run's records are taken: the partition's state says so, and its last record is written
        asking for the report that confirms it and every record before it — or, where the run waits
        for segments (``run``, its records before ``last``), kept until they are stored."""
        st.next_target += taken
        follows = (last.offset() or 0) + 1
        st.last_source, st.read_to, st.begun = follows - 1, follows, True
        if run is not None:
            waiting.wait(st, [*run, last], st.next_target - 1)
        else:
            self._write((st.topic, st.partition), last, st.next_target - 1, report=True)

    def _store_segments(self, waiting: Waiting) -> None:
        """The batch's segments stored on the target and acknowledged (with every record written
        before them), before any record after them is written: the stored map always covers the
        target. A copy cut off between the two leaves segments ahead of the target's end, which the
        next take-up of the partition removes (``_take_up``)."""
        for st, source, target in waiting.segments:
            record_key, value = segment_record(self.link.id, st.topic, st.partition, source, target)
            self._produce(MAP_TOPIC, value, record_key, on_delivery=self._map_delivered)
        self._acknowledged("the offset map could not be stored")

    def _write_runs(self, waiting: Waiting) -> None:
        """The runs that waited for the segments, written in order, each one's last with a report. A
        partition's records of one segment are acknowledged before those of its next are written: no
        target batch spans two segments, which the gateway's translation of a fetched batch counts on
        (it rewrites the batch's base offset only). So a batch with several gaps in a partition (a
        transaction committed after each few records) waits once per gap there, but once for every
        partition's."""
        for number, runs in enumerate(waiting.rounds()):
            if number:
                if self._stop.is_set():  # what is left waits for the next take-up (``_forget_ahead``)
                    raise MirrorError("stopped between the rounds of a batch")
                self._acknowledged("the target did not acknowledge a segment's records")
            for st, records, target in runs:
                if st.error:  # a report failed the partition meanwhile: nothing more of it
                    continue
                key = (st.topic, st.partition)
                for msg in records[:-1]:
                    self._write(key, msg, -1, report=False)
                self._write(key, records[-1], target, report=True)

    def _write(self, key: Key, msg: Message, target: int, *, report: bool) -> None:
        """Write ``msg`` to the target, where it will be at ``target`` (checked if ``report``)."""
        kind, timestamp = msg.timestamp()
        if kind == TIMESTAMP_NOT_AVAILABLE:
            timestamp = 0  # the target stamps it
        self._produce(
            key[0], msg.value(), msg.key(), partition=key[1], headers=msg.headers(), timestamp=timestamp,
            on_delivery=partial(self._delivered, key, target) if report else None,
        )  # fmt: skip

    def _produce(self, topic: str, value: bytes | None, key: bytes | None, **kwargs: Any) -> None:
        """Produce, waiting while the producer's queue is full (the target slow or away), stoppably."""
        assert self._clients is not None
        producer = self._clients.producer
        while True:
            try:
                producer.produce(topic, value, key, **kwargs)
                return
            except BufferError:
                if self._stop.is_set():
                    raise MirrorError("stopped while the target was not taking records") from None
                producer.poll(0.05)

    def _acknowledged(self, what: str) -> None:
        """Everything produced so far acknowledged by the target, or MirrorError saying ``what``."""
        assert self._clients is not None
        if self._clients.producer.flush(30) or self._failure:
            raise MirrorError(f"{what}: {self._failure or 'not acknowledged in 30 s'}")

    def _copy_error(self, key: Key, st: PartitionCopy | None, error: KafkaError, msg: Message) -> None:
        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            if st is not None:
                st.source_end = max(st.source_end, msg.offset() or 0)
                st.read_to = max(st.read_to, msg.offset() or 0)
                st.fetched_at = time.time()
            return
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE) and st is not None:
            self._fail_partition(key, gone(st.read_to, None, None))
            return
        raise MirrorError(f"source: {error}")

    def _delivered(self, key: Key, expected: int, error: KafkaError | None, msg: Message) -> None:
        """The report of a partition's last record in a batch: it and every record before it are on the
        target, at the offsets predicted. A batch librdkafka sent again (its leader moved, a connection
        closed) that the target had written already is answered DUPLICATE_SEQUENCE_NUMBER where the
        broker no longer holds its offsets, and reported written with no offset: the idempotent producer
        wrote it once, in order, and the next report checks the offsets again. Read as offset 0, it
        stopped the partition's copy for good, "something else writes to the target" (a chaos run: the
        target's broker restarted 4 min before, a switchback refused)."""
        if error is not None:
            self._failure = f"the target refused a record for {key[0]}[{key[1]}]: {error}"
            return
        st = self._partitions.get(key)
        if st is None:
            return
        offset = msg.offset()
        if offset is None:  # sent again, and written already: its offset is not told
            log.warning(
                "link %s: %s[%d]: a batch sent again was on the target already (DUPLICATE_SEQUENCE_NUMBER: "
                "its offset not told), taken to end at %d; the reports after it are checked",
                self.link.id, key[0], key[1], expected,
            )  # fmt: skip
            offset = expected
        if offset != expected:
            self._fail_partition(
                key,
                f"the target wrote a copy at offset {offset}, the mirror expected {expected}: "
                "something else writes to the target partition",
            )
            self._failure = self._failed[key]
            return
        st.acked_target = max(st.acked_target, offset + 1)

    def _map_delivered(self, error: KafkaError | None, _: Message) -> None:
        if error is not None:
            self._failure = f"the target refused an offset map record: {error}"

    def _fail_partition(self, key: Key, reason: str) -> None:
        """Stop copying ``key`` for the life of this process; the first reason is the one kept."""
        if key in self._failed:
            reason = self._failed[key]
        else:
            log.error("link %s: %s[%d]: %s", self.link.id, key[0], key[1], reason)
            self._failed[key] = reason
        st = self._partitions.get(key)
        if st is not None:
            st.error = reason
        if self._clients is not None:
            self._clients.consumer.pause([TopicPartition(key[0], key[1])])


GROWN_WITHIN_S = 10.0
"""How long clients' metadata may take to show partitions added a moment ago."""


def _await_partitions(clients: list[Consumer | Producer], keys: list[Key]) -> None:
    """Until each client's metadata shows every partition of ``keys`` (or ``GROWN_WITHIN_S`` is over):
    librdkafka refreshes its metadata every 5 min and answers a partition it does not know as unknown
    at once, so one added a moment ago (``grow_copies``) ended the session: a rebalance and a restart
    for every growth."""
    wanted = partition_counts(keys)
    deadline = time.monotonic() + GROWN_WITHIN_S
    for client in clients:
        while True:
            known = client.list_topics(timeout=5).topics  # every topic: one request, the cache renewed
            if all(t not in known or len(known[t].partitions) >= n for t, n in wanted.items()):
                break
            if time.monotonic() > deadline:
                return
            time.sleep(0.2)
