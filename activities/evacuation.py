"""A cluster evacuation's own steps: its plan, the copy of every topic it moves (one link, which each
batch's switch splits), and retiring what is left on the source once an operator says so. The batches
themselves are planned switches (:mod:`workflows.planned`)."""

from __future__ import annotations

import re

from activities.deps import Deps
from activities.links import caught_up
from activities.migration import remove_links
from activities.pulse import beat
from activities.recorded import step
from switchyard import kafka
from switchyard.errors import BindingRefused, CopyFailed
from switchyard.ledger.kinds import LinkChange
from switchyard.mirror.status import read_status
from switchyard.model import LinkState
from switchyard.moves.cluster import plan_evacuation
from switchyard.sagas import evacuations
from switchyard.sagas.evacuations import (
    CopyClusterRequest,
    EvacuationPlan,
    EvacuationPlanRequest,
    RetiredEvacuated,
    RetireEvacuatedRequest,
)
from switchyard.sagas.steps import MigrationLink


class EvacuationActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @step(evacuations.PLAN_EVACUATION)
    def plan_evacuation(self, request: EvacuationPlanRequest) -> EvacuationPlan:
        return plan_evacuation(self.deps.store, self.deps.config, request, beat=beat)

    @step(evacuations.COPY_CLUSTER)
    def copy_cluster(self, request: CopyClusterRequest) -> MigrationLink:
        """The evacuation's link copying every topic it moves (made, or taken up from an earlier run with
        the topics it lacks added), then the wait until the copy keeps up with the source."""
        actor = f"saga:{request.saga_id}"
        wanted = tuple(re.escape(t) for t in sorted(request.topics))
        link = self.deps.store.link(request.link)
        if link is None:
            self.deps.store.create_link(
                request.link, request.source, request.target, include=wanted, actor=actor,
                reason=f"cluster evacuation: copy {len(wanted)} topics of {request.source}",
            )  # fmt: skip
        else:
            if (link.source, link.target) != (request.source, request.target):
                raise BindingRefused(f"link {link.id} exists and copies {link.source} to {link.target}")
            if link.state is not LinkState.RUNNING:
                raise BindingRefused(f"link {link.id} is {link.state}: it must run to catch up")
            missing = tuple(p for p in wanted if p not in link.include)
            if missing:
                change = LinkChange(link.id, link.epoch, link.source, link.target, link.include + missing,
                                    link.exclude, link.state, link.reverse_of)  # fmt: skip
                self.deps.store.apply(
                    [change], actor=actor, reason=f"cluster evacuation: {len(missing)} more"
                )
        return caught_up(
            self.deps, self.deps.link(request.link), f"{len(wanted)} topics of {request.source}",
            request.caught_up_s, request.timeout_s,
        )  # fmt: skip

    @step(evacuations.RETIRE_EVACUATED)
    def retire_evacuated(self, request: RetireEvacuatedRequest) -> RetiredEvacuated:
        """Remove each batch's links (its promoted link, and its reverse, which writes into the source's
        topics) and wait until no mirror copies them; check that the link left with the unused topics has
        copied each to its end; delete the topics on the source; remove that link last. A retry skips what
        is done: the unused topics are deleted only while their link is there to vouch for their copy."""
        actor, why = f"saga:{request.saga_id}", f"cluster evacuation of {request.source}: retired"
        last = request.unused_link
        removed = remove_links(self.deps, [x for x in request.links if x != last], actor=actor, reason=why)
        if request.unused:
            if last is not None and self.deps.store.link(last) is not None:
                self._copied_exactly(request.source, last, request.unused)
            else:
                self._gone_already(request.source, request.unused, last)
        bootstrap = self.deps.bootstrap(request.source)
        deleted = []
        for number, topic in enumerate(request.topics, start=1):
            if kafka.delete_topic(bootstrap, topic):
                deleted.append(topic)
            beat(f"deleted {number} of {len(request.topics)} topics on {request.source}")
        if last is not None and last in request.links:
            removed += remove_links(self.deps, [last], actor=actor, reason=why)
        return RetiredEvacuated(removed, deleted)

    def _gone_already(self, source: str, topics: list[str], link_id: str | None) -> None:
        """With the link that copied them gone, nothing vouches for the unused topics' copies: they must be
        gone from the source already (an earlier attempt deleted them before removing the link)."""
        left = sorted(
            {t for t, _ in kafka.partitions(self.deps.bootstrap(source), lambda n: n in set(topics))}
        )
        if left:
            raise CopyFailed(
                f"link {link_id} that copied {', '.join(left[:5])} (no application used them) is gone: "
                "whether their copies are whole is unknown; they are not deleted"
            )

    def _copied_exactly(self, source: str, link_id: str | None, topics: list[str]) -> None:
        """Every partition of ``topics`` on the source is copied by the link to its end (nothing writes
        there: the plan saw no application use them, and no record written meanwhile)."""
        wanted = set(kafka.partitions(self.deps.bootstrap(source), lambda name: name in set(topics)))
        reported = {
            s.key: s
            for member in (read_status(self.deps.zk, self.deps.store.layout, link_id) if link_id else [])
            for s in member.partitions
        }
        behind = sorted(
            f"{t}[{p}]" + (f" {reported[(t, p)].lag} behind" if (t, p) in reported else " not copied")
            for t, p in wanted
            if (t, p) not in reported or reported[(t, p)].lag != 0 or reported[(t, p)].source_end < 0
        )
        if behind:
            raise CopyFailed(
                f"link {link_id} has not copied all of the topics no application used: "
                f"{', '.join(behind[:5])}; nothing is deleted"
            )
