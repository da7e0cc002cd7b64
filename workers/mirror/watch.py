"""Whether a copy session still works: a copy loop that stopped turning, and a member its group never
took back.

A test restarted the source's only broker a moment after a link was taken up; librdkafka timed the
group's session out, let the partitions go, and in 2 of about 7 suite runs never took them back: the
link copied nothing for the next 60 s, with no error anywhere. It never happened alone (27 runs, broker
down 1-8 s, both cores busy), so its cause is not known. A session whose member the group does not
list, after holding nothing for ``REJOIN_WITHIN_S``, ends and the next one starts with a new consumer
(a member with nothing because the group gave its partitions to others is left alone). A copy loop
stuck in a call logs where it is.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback

from switchyard.admins import GROUP_REQUEST_TIMEOUT_S, Admins

log = logging.getLogger(__name__)

REJOIN_WITHIN_S = 20.0
"""A subscribed member that held nothing this long asks the group whether it is in it at all. A member
that has joined is listed while the group waits for the others (up to a session time-out for one that
died), so asking early costs one describe; librdkafka rejoined within 1-8 s of a broker's restart here,
and a switch's drain waits 60 s."""
STALL_S = 60.0
"""A copy loop that has not turned for this long is stuck in a call: its stack is logged, once per stall
(a topic listing against a source that is down takes up to ~10 s, a flush of what is in flight 30 s)."""


class SessionWatch:
    """One copy session's watch: the copy loop reports each turn and whether it holds partitions."""

    def __init__(self, link_id: str, thread: threading.Thread) -> None:
        self._link_id = link_id
        self._thread = thread
        self._turned = time.monotonic()
        self._unheld_since: float | None = None

    def turned(self) -> None:
        self._turned = time.monotonic()

    def ask_group(self, holds: bool, waits: bool, now: float) -> bool:
        """Whether the group should be asked about this member now: it ``waits`` for partitions (it is
        subscribed and copying), ``holds`` none, and has held none for ``REJOIN_WITHIN_S`` since it was
        last asked."""
        if holds or not waits:
            self._unheld_since = None
            return False
        if self._unheld_since is None:
            self._unheld_since = now
        if now - self._unheld_since < REJOIN_WITHIN_S:
            return False
        self._unheld_since = now
        return True

    def watch(self, over: threading.Event) -> None:
        """Until ``over``: log the copy loop's stack when it has not turned for ``STALL_S``."""
        stalled = False
        while not over.wait(STALL_S / 6):
            idle = time.monotonic() - self._turned
            if idle > STALL_S and not stalled:
                frame = sys._current_frames().get(self._thread.ident or -1)
                where = "".join(traceback.format_stack(frame)) if frame is not None else "(gone)\n"
                log.warning("link %s: the copy loop has not turned for %.0f s; it is in\n%s",
                            self._link_id, idle, where.rstrip())  # fmt: skip
            stalled = idle > STALL_S


def is_member(
    admins: Admins, cluster: str, group: str, member_id: str | None, timeout_s: float = 10.0
) -> bool | None:
    """Whether ``group`` on ``cluster`` lists ``member_id`` among its members (librdkafka's id is empty
    after a session ended until it joins again: listed by none); None when the group could not be
    described (the cluster is away: a new session would not help). A client whose request failed is
    retired (librdkafka's AdminClient may never answer a group request again after one)."""
    try:
        with admins.asking(cluster) as admin:
            for future in admin.describe_consumer_groups(
                [group], request_timeout=GROUP_REQUEST_TIMEOUT_S
            ).values():
                return any(m.member_id == member_id for m in future.result(timeout_s).members)
    except Exception as exc:  # a describe that fails says nothing about the member
        log.info("group %s not described: %s", group, exc)
    return None
