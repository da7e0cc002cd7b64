"""What a copier tells the rest of Switchyard: its status node in ZooKeeper (per partition: the source's
end, what is mirrored, the lag), and how it keeps the source's ends known — from librdkafka's statistics
while copying, read directly while paused (nothing is fetched then)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from confluent_kafka import Consumer
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from switchyard import kafka
from switchyard.mirror.status import MemberStatus, PartitionStatus, member_path
from switchyard.routing.layout import Layout
from workers.mirror.progress import Key, PartitionCopy

log = logging.getLogger(__name__)


class SourceEnds:
    """Each copied partition's source end and when its leader last answered."""

    def __init__(self, partitions: dict[Key, PartitionCopy]) -> None:
        self._partitions = partitions
        self.answered_at: float | None = None
        """When the source last answered this link (a fetch, a topic listing, a read of its ends):
        the mirror's view of whether the source cluster is reachable."""

    def answered(self) -> None:
        self.answered_at = time.time()

    def from_stats(self, raw: str) -> None:
        """librdkafka statistics: each partition's high watermark and when its leader last answered."""
        stats = json.loads(raw)
        now = time.time()
        answered: dict[int, float] = {}
        for broker in stats.get("brokers", {}).values():
            if broker.get("state") == "UP" and broker.get("rxidle", -1) >= 0:
                answered[broker["nodeid"]] = now - broker["rxidle"] / 1e6
        if answered:
            self.answered_at = max(self.answered_at or 0.0, *answered.values())
        for topic, entry in stats.get("topics", {}).items():
            for number, partition in entry.get("partitions", {}).items():
                st = self._partitions.get((topic, int(number)))
                if st is None or partition.get("hi_offset", -1) < 0:
                    continue
                # ends only grow: librdkafka's figure for a paused partition is older than the one read
                st.source_end = max(st.source_end, partition["hi_offset"])  # directly while paused
                leader = answered.get(partition.get("leader", -1))
                if leader is not None and partition.get("fetch_state") == "active":
                    st.fetched_at = leader

    def read(self, probe: Consumer, link_id: str) -> None:
        """While paused nothing is fetched, so the source's ends are read directly: the status keeps
        saying how much the target lacks (what an unplanned failover would lose)."""
        keys = [k for k, st in self._partitions.items() if not st.error]
        try:
            ends = kafka.log_ends(probe, keys, timeout_s=5)
        except Exception as exc:  # the source away: the last ends seen stay, with their time
            log.debug("link %s: source ends not read while paused: %s", link_id, exc)
            return
        now = time.time()
        if ends:
            self.answered_at = now
        for key, end in ends.items():
            st = self._partitions.get(key)
            if st is not None:
                st.source_end, st.fetched_at = end, now


class StatusNode:
    """A copier's ephemeral status node, ``links/<id>/status/<member>``."""

    def __init__(
        self,
        zk: KazooClient,
        layout: Layout,
        member: str,
        link_id: Callable[[], str],
        current: Callable[[], tuple[list[PartitionStatus], str | None, tuple[str, ...], int]],
    ) -> None:
        self.zk, self.layout, self.member = zk, layout, member
        self._link_id = link_id
        self._current = current
        """The partitions' statuses, the link's error and its notes, now."""
        self._lock = threading.Lock()
        self._retired = False
        """Taken down for good (the copier ended, or the link was removed)."""

    def when_due(self, due: threading.Event, session_over: threading.Event) -> None:
        """Publish whenever the copy loop says it is due. A ZooKeeper write waits for the ensemble's
        disk (tens of milliseconds on a busy host): on the copy loop it stalled the copy."""
        while True:
            due.wait()
            due.clear()
            if session_over.is_set():
                return
            try:
                self.publish()
            except Exception:  # the status says it is stale by its time; the copy goes on
                log.exception("link %s: status not published", self._link_id())

    def publish(self) -> None:
        partitions, link_error, notes, listed_epoch = self._current()
        status = MemberStatus(
            member=self.member,
            host=f"{os.uname().nodename}:{os.getpid()}",
            updated_at=datetime.fromtimestamp(time.time(), UTC),
            partitions=tuple(partitions),
            link_error=link_error,
            notes=notes,
            listed_epoch=listed_epoch,
        )
        link_id = self._link_id()
        path = member_path(self.layout, link_id, self.member)
        with self._lock:
            if self._retired:
                return  # taken down for good: a late publisher must not put it back
            try:
                try:
                    self.zk.set(path, status.to_json())
                except NoNodeError:
                    self.zk.create(path, status.to_json(), ephemeral=True, makepath=True)
            except (KazooException, NodeExistsError) as exc:
                log.warning("link %s: status not published: %r", link_id, exc)

    def retire(self) -> None:
        with self._lock:
            self._retired = True
            with contextlib.suppress(KazooException):
                self.zk.delete(member_path(self.layout, self._link_id(), self.member))
