"""Saga steps that make or change links: splitting the keys' topics off a shared link before a switch
(and giving them back when the switch is abandoned before the new link is made), and reversing the
promoted link after it. A retried step finds what its earlier attempt did."""

from __future__ import annotations

import time

from activities.deps import Deps
from activities.pulse import beat
from activities.recorded import step
from switchyard import kafka
from switchyard.errors import BindingRefused
from switchyard.mirror.control import reverse_link
from switchyard.mirror.splitting import split_link, undo_split
from switchyard.mirror.status import read_status
from switchyard.sagas import steps
from switchyard.sagas.steps import Reversed, ReverseRequest, Split, SplitRequest

_FOLLOW_POLL_S = 0.2


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
