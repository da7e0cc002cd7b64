"""Carrying consumer groups' offsets for the partitions one mirror process copies, and the ACLs on
those groups, every ``mirror.group_sync_interval_s``, off the copy loop (listing a source's groups can
take long)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from kazoo.client import KazooClient

from switchyard.admins import Admins
from switchyard.mirror.groups import sync_groups
from switchyard.mirror.writers import GroupWriters
from switchyard.model import Link, LinkState
from switchyard.routing.layout import Layout
from workers.mirror.acls import sync_group_acls
from workers.mirror.progress import Key, PartitionCopy

log = logging.getLogger(__name__)


class GroupCarry:
    def __init__(
        self,
        zk: KazooClient,
        layout: Layout,
        member: str,
        link: Callable[[], Link],
        copying: Callable[[], dict[Key, PartitionCopy]],
        *,
        principals: Callable[[Link], Mapping[str, str]],
        note: Callable[[str, str | None], None],
    ) -> None:
        self.zk, self.layout, self.member = zk, layout, member
        self._link, self._principals, self._note = link, principals, note
        self._copying = copying
        """The partitions this process copies now (a copy of the table: the copy loop changes it)."""

    def every(self, interval_s: float, admins: Admins, session_over: threading.Event) -> None:
        while not session_over.wait(interval_s):
            if self._copying() and self._link().state is LinkState.RUNNING:
                self.once(admins)
            else:  # carrying nothing: a note about the groups it carried no longer holds
                self._note("group acls", None)

    def once(self, admins: Admins) -> None:
        """Carry the groups' offsets for the partitions this process copies (each process its own), and
        bring the target's ACLs on the groups with offsets on the link's topics in line with the source's."""
        link = self._link()
        copying = {k: st for k, st in self._copying().items() if not st.error}
        writers = GroupWriters(self.zk, self.layout, link.id, f"mirror:{self.member}")
        try:
            with admins.asking(link.source) as source, admins.asking(link.target) as target:
                report = sync_groups(
                    source,
                    target,
                    link.copies,
                    {k: st.offset_map for k, st in copying.items()},
                    {k: st.mirrored() for k, st in copying.items()},
                    turn=writers.carry,
                )
                if not report.failed_in_client:
                    self._note(
                        "group acls", sync_group_acls(source, target, report.carried, self._principals(link))
                    )
        except Exception as exc:  # groups are synced again at the next interval; copying goes on
            log.warning("link %s: group offsets not synced: %s", link.id, exc)
            return
        if report.failed_in_client:  # which side failed is not told: both clients are made anew
            admins.retire(link.source, source)
            admins.retire(link.target, target)
            log.warning("link %s: group offsets synced in part: %s", link.id, report.failed_in_client)
        if report.written:
            groups = sorted({w.group for w in report.written})
            log.info(
                "link %s: %d group offsets carried (%s)", link.id, len(report.written), ", ".join(groups)
            )
        for written in report.written:
            log.debug("link %s: %s", link.id, written)
        for reason in report.skipped:
            log.debug("link %s: group offsets: %s", link.id, reason)
