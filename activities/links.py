"""Saga steps that make or change links: splitting the keys' topics off a shared link before a switch
(and giving them back when the switch is abandoned before the new link is made), and reversing the
promoted link after it. A retried step finds what its earlier attempt did."""

from __future__ import annotations

import time

from activities.deps import Deps
from activities.pulse import beat
from activities.recorded import step
from switchyard import kafka
from switchyard.errors import BindingRefused, CopyFailed, DrainTimeout
from switchyard.mirror.control import reverse_link
from switchyard.mirror.splitting import split_link, undo_split
from switchyard.mirror.status import read_status
from switchyard.model import Link
from switchyard.sagas import steps
from switchyard.sagas.steps import MigrationLink, Reversed, ReverseRequest, Split, SplitRequest

_FOLLOW_POLL_S = 0.2
SPLIT_CAUGHT_UP_S = 1.0
"""A split's new link keeps up when every partition was fully copied within this many seconds."""
SPLIT_CATCH_UP_MOST_S = 10.0
"""How long the split waits for that at most (the drain after the block takes what is left)."""


class LinkActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @step(steps.SPLIT)
    def split_link(self, request: SplitRequest) -> Split:
        """Move the keys' topics to a link of their own, and wait until a mirror process copies it: the
        drain after the block counts on it."""
        split = request.split
        epoch = split_link(
            self.deps.config, self.deps.store, split.link, split.new_link, split.topics,
            actor=f"saga:{request.saga_id}", reason="switch: the keys' topics alone are promoted",
            wait_s=request.wait_s, progress=beat,
        )  # fmt: skip
        if not self._followed(split.new_link, request.wait_s):
            raise BindingRefused(
                f"no mirror process copies {split.new_link} after {request.wait_s:g}s: is a mirror running?"
            )
        # the copy taken over by the new link catches up before the block, not during the drain after it,
        # while clients are held (at a batch of 40 partitions split off a link of 400: 0.8 s of held time)
        new_link = self.deps.link(split.new_link)
        most_s = min(request.wait_s, SPLIT_CATCH_UP_MOST_S)  # inside the step's time-out, past two waits
        caught_up(self.deps, new_link, new_link.id, SPLIT_CAUGHT_UP_S, most_s, must=False)
        return Split(split.new_link, epoch)

    @step(steps.UNSPLIT)
    def undo_split(self, request: SplitRequest) -> bool:
        """A compensation: the topics go back to the link they came from, unless the new link was made
        (it copies them then, as well as the old one did)."""
        split = request.split
        return undo_split(
            self.deps.store, split.link, split.new_link, split.topics, actor=f"saga:{request.saga_id}",
            reason="switch abandoned: the topics go back to their link",
        )  # fmt: skip

    @step(steps.REVERSE)
    def reverse_link(self, request: ReverseRequest) -> Reversed:
        """Copy back from the promoted side for the switch back; a retry finds its link made."""
        existing = self.deps.store.link(request.new_link)
        uncopied = 0
        if existing is None or existing.reverse_of != request.link:
            report = reverse_link(
                self.deps.config, self.deps.store, request.link, request.new_link,
                actor=f"saga:{request.saga_id}", reason="switch: copy back for the switch back",
                force=request.force,
            )  # fmt: skip
            uncopied = sum(report.uncopied.values())
        return Reversed(
            request.new_link, uncopied, self._followed(request.new_link, request.follow_timeout_s)
        )

    def _followed(self, link_id: str, timeout_s: float) -> bool:
        """Wait until a mirror process reports every partition of the link (so the next switch can be
        planned, or the drain count on it); False when none has within ``timeout_s``."""
        link = self.deps.link(link_id)
        wanted = len(kafka.partitions(self.deps.bootstrap(link.source), link.copies))
        deadline = time.monotonic() + timeout_s
        while True:
            reported = {
                (s.topic, s.partition)
                for member in read_status(self.deps.zk, self.deps.store.layout, link_id)
                for s in member.partitions
            }
            if len(reported) >= wanted:
                return True
            if time.monotonic() > deadline:
                return False
            beat(f"waiting for a mirror process to copy {link_id}")
            time.sleep(_FOLLOW_POLL_S)


def caught_up(
    deps: Deps, link: Link, what: str, caught_up_s: float, timeout_s: float, *, must: bool = True
) -> MigrationLink:
    """Wait, heartbeating how far the copy got, until every partition of ``link`` was fully copied within
    ``caught_up_s``; its figures then. ``what`` names what it copies in the error; past ``timeout_s``,
    DrainTimeout unless not a ``must`` (the figures as they are then)."""
    deadline = time.monotonic() + timeout_s
    while True:
        reported = {
            s.key: s for member in read_status(deps.zk, deps.store.layout, link.id) for s in member.partitions
        }
        failed = [f"{s.topic}[{s.partition}]: {s.error}" for s in reported.values() if s.error]
        if failed:
            raise CopyFailed(f"link {link.id} stopped copying {'; '.join(failed[:5])}")
        behind = {p: s.lag for p, s in reported.items() if s.source_end < 0 or s.lag_s > caught_up_s}
        missing = [
            key for key in kafka.partitions(deps.bootstrap(link.source), link.copies) if key not in reported
        ]
        if not behind and not missing:
            return MigrationLink(link.id, len(reported), sum(s.mirrored for s in reported.values()))
        beat(
            {
                "copied": sum(max(0, s.mirrored) for s in reported.values()),
                "lag": sum(max(0, s.lag) for s in reported.values()),
                "unreported": len(missing),
            }
        )
        if time.monotonic() > deadline:
            if not must:
                return MigrationLink(
                    link.id, len(reported), sum(max(0, s.mirrored) for s in reported.values())
                )
            raise DrainTimeout(
                f"link {link.id} did not catch up with {what} in {timeout_s:g}s: {len(missing)} partitions "
                f"unreported (is a mirror running?), {sum(behind.values())} records behind"
            )
        time.sleep(_FOLLOW_POLL_S)
