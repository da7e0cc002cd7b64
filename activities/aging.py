"""The aging check's steps and the retirement of an origin topic (:mod:`workflows.aging`): each reads
the routing tree and the origin afresh, so a step retried, or run again by the next check, changes
nothing twice (every routing change is fenced on the record as read)."""

from __future__ import annotations

from activities.deps import Deps
from activities.recorded import step
from switchyard import kafka
from switchyard.errors import BindingRefused
from switchyard.moves.partition_aging import age_migrations, check_retirable, record_origin_ends, retirable
from switchyard.sagas import steps
from switchyard.sagas.steps import (
    Aged,
    AgingCheck,
    OriginEnds,
    OriginTopicChecked,
    OriginTopicStep,
    RetirableTopic,
)


class AgingActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @step(steps.RECORD_ORIGIN_ENDS, recorded=False)
    def record_origin_ends(self, check: AgingCheck) -> OriginEnds:
        found = record_origin_ends(self.deps.store, self.deps.config, actor=check.actor)
        return OriginEnds([end.describe() for end in found])

    @step(steps.AGE_MIGRATIONS, recorded=False)
    def age_partition_migrations(self, check: AgingCheck) -> Aged:
        found = age_migrations(self.deps.store, self.deps.config, actor=check.actor)
        ripe, held = retirable(self.deps.store, self.deps.config)
        return Aged(
            [a.describe() for a in found if a.aged],
            [a.describe() for a in found if not a.aged] + held,
            [RetirableTopic(t.origin, t.topic, t.partitions) for t in ripe],
        )

    @step(steps.CHECK_ORIGIN_TOPIC)
    def check_origin_topic(self, request: OriginTopicStep) -> OriginTopicChecked:
        return self._checked(request)

    @step(steps.RETIRE_ORIGIN_TOPIC)
    def retire_origin_topic(self, request: OriginTopicStep) -> OriginTopicChecked:
        """Checked again right before the deletion: the approval may have waited an hour."""
        checked = self._checked(request)
        if checked.refusal is not None or checked.partitions == 0:
            return checked
        deleted = kafka.delete_topic(self.deps.bootstrap(request.origin), request.topic)
        return OriginTopicChecked(checked.partitions, deleted=deleted)

    def _checked(self, request: OriginTopicStep) -> OriginTopicChecked:
        try:
            ripe = check_retirable(self.deps.store, self.deps.config, request.origin, request.topic)
        except BindingRefused as refused:
            return OriginTopicChecked(0, str(refused))
        return OriginTopicChecked(0 if ripe is None else ripe.partitions)
