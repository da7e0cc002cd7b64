"""Partition migration's steps (seed 004): its plan, holding the partition's writes at every gateway,
recording the origin's exact end as the end offset, calling it off, and checking the origin after.

Every routing write is fenced on the migration's record as read and carries a request id derived from
the run and the step, so a step retried after its answer was lost writes nothing twice.
"""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient

from activities.deps import Deps
from activities.pulse import beat
from activities.recorded import request_id, step
from activities.routing import RoutingActivities
from switchyard import kafka
from switchyard.acked import acked_end
from switchyard.errors import BindingConflict, BindingRefused, CopyFailed
from switchyard.ledger.kinds import AnyChange
from switchyard.model import ClusterState, MigrationMode, MigrationState, PartitionId, PartitionMigration
from switchyard.moves.partition import plan_partition
from switchyard.routing import ClusterChange, MigrationChange
from switchyard.sagas import steps
from switchyard.sagas.steps import (
    OriginChecked,
    PartitionHeld,
    PartitionMigrated,
    PartitionPlan,
    PartitionPlanRequest,
    PartitionStep,
)
from switchyard.topic_copies import create_copies

_POLL_S = 0.05
_FAULT_TRIES = 3
"""A fault migration's change also shields its origin, fenced on the origin's record: another fault
migration from the same origin may have changed it first. Read again and retried (then not shielded
twice)."""


class PartitionActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.routing = RoutingActivities(deps)

    @step(steps.PLAN_PARTITION)
    def plan_partition_migration(self, request: PartitionPlanRequest) -> PartitionPlan:
        return plan_partition(self.deps.store, self.deps.config, request)

    @step(steps.HOLD_PARTITION)
    def hold_partition_writes(self, request: PartitionStep) -> PartitionHeld:
        """Record the migration as migrating — every gateway then holds the partition's writes — and wait
        until every gateway has applied it: no write routed to the origin is in flight after that. The
        target's end now is what the end offset will stand for there."""
        store, key = self.deps.store, (request.topic, request.partition)
        origin = AdminClient({"bootstrap.servers": self.deps.bootstrap(request.origin)})
        target = AdminClient({"bootstrap.servers": self.deps.bootstrap(request.target)})
        create_copies(origin, target, {request.topic: self._partitions(request)})  # leaving out: logged
        done = self._done(request, "hold")
        if done is None:
            base = self.deps.ends(request.target, [key])[key]
            change = MigrationChange(
                PartitionId(*key), 0, request.origin, request.target, MigrationMode.SMOOTH,
                MigrationState.MIGRATING, target_base=base, ignore_origin=request.ignore_origin,
            )  # fmt: skip
            done = store.apply(
                [change], actor=f"saga:{request.saga_id}", reason="partition migration: hold its writes",
                request_id=request_id("hold"),
            )  # fmt: skip
        gateways = self.routing.wait(done, request.acks_timeout_s)
        return PartitionHeld(done, gateways, self._migration(request).target_base)

    @step(steps.MIGRATE_PARTITION)
    def migrate_partition(self, request: PartitionStep) -> PartitionMigrated:
        """Record the end offset — a smooth migration's: the origin's exact end, read while its writes are
        held and none is in flight; a fault migration's: beyond anything the origin acknowledged, the
        origin shielded in the same change — from then on the partition's writes go to the target.
        Waits until every gateway has applied it."""
        done = self._done(request, "migrate")
        for attempt in range(_FAULT_TRIES):
            if done is not None:
                break
            changes = self._faulted(request) if request.fault else self._ended(request)
            end = changes[0].end_offset if isinstance(changes[0], MigrationChange) else None
            try:
                done = self.deps.store.apply(
                    changes, actor=f"saga:{request.saga_id}", request_id=request_id("migrate"),
                    reason=f"partition migration: its end offset is {end}",
                )  # fmt: skip
            except BindingConflict:  # another fault migration from the origin shielded it meanwhile
                if not request.fault or attempt == _FAULT_TRIES - 1:
                    raise
        assert done is not None
        gateways = self.routing.wait(done, request.acks_timeout_s)
        migrated = self._migration(request)
        assert migrated.end_offset is not None
        return PartitionMigrated(done, gateways, migrated.end_offset, migrated.origin_end)

    def _ended(self, request: PartitionStep) -> list[AnyChange]:
        migration = self._migration(request)
        if migration.state is not MigrationState.MIGRATING:
            raise BindingRefused(f"migration of {migration.id} is {migration.state}, not migrating")
        key = (request.topic, request.partition)
        end = self._end_reaching(request, acked_end(self.deps.store.zk, self.deps.store.layout,
                                                    request.origin, *key) or 0)  # fmt: skip
        return [MigrationChange.of(migration, state=MigrationState.MIGRATED, end_offset=end, origin_end=end)]

    def _end_reaching(self, request: PartitionStep, acked: int) -> int:
        """The origin's end once it reaches ``acked``, the highest end the gateways saw acknowledged
        (published before they acknowledged the hold): a write acknowledged with acks=1 may run ahead of
        the high watermark until the followers have it, and an end read short of it would leave that
        record past the end offset, never read."""
        key = (request.topic, request.partition)
        deadline = time.monotonic() + request.acks_timeout_s
        while (end := self.deps.ends(request.origin, [key])[key]) < acked:
            if time.monotonic() > deadline:
                raise CopyFailed(
                    f"{request.origin}'s end of {request.topic}[{request.partition}] stays at {end}, "
                    f"short of {acked} the gateways saw acknowledged: acknowledged writes not replicated, "
                    "or lost to a leader change"
                )
            beat(f"the origin's end {end} is short of {acked} acknowledged")
            time.sleep(_POLL_S)
        return end

    def _faulted(self, request: PartitionStep) -> list[AnyChange]:
        """The migration in effect at once, its end offset the highest end the gateways saw acknowledged
        plus the margin, and the origin shielded: not contacted, its clients answered at once."""
        store, key = self.deps.store, (request.topic, request.partition)
        acked = acked_end(store.zk, store.layout, request.origin, *key)
        end = (acked or 0) + request.fault_margin
        base = self.deps.ends(request.target, [key])[key]
        migration = MigrationChange(
            PartitionId(*key), 0, request.origin, request.target, MigrationMode.FAULT,
            MigrationState.MIGRATED, end_offset=end, target_base=base, ignore_origin=request.ignore_origin,
        )  # fmt: skip
        changes: list[AnyChange] = [migration]
        origin = store.cluster(request.origin)
        if origin is not None and origin.state is ClusterState.ACTIVE:
            changes.append(ClusterChange(origin.id, origin.epoch, origin.bootstrap, ClusterState.SHIELDED))
        return changes

    @step(steps.CALL_OFF_PARTITION)
    def call_off_partition_migration(self, request: PartitionStep) -> PartitionMigrated:
        """Remove a migration that has not taken effect (its held writes go on to the origin); one that
        took effect after all is left, and said (the saga then goes forward)."""
        migration = self.deps.store.migration(PartitionId(request.topic, request.partition))
        if migration is None:
            return PartitionMigrated(0, 0, -1, None)
        if migration.in_effect:
            assert migration.end_offset is not None
            return PartitionMigrated(migration.epoch, 0, migration.end_offset, migration.origin_end)
        if migration.by != f"saga:{request.saga_id}":
            raise BindingRefused(f"migration of {migration.id} was made by {migration.by}, not this saga")
        epoch = self.deps.store.apply(
            [MigrationChange.of(migration, state=MigrationState.CALLED_OFF)], actor=f"saga:{request.saga_id}",
            reason="partition migration abandoned: its writes go on to the origin",
            request_id=request_id("call-off"),
        )  # fmt: skip
        return PartitionMigrated(epoch, self.routing.wait(epoch, request.acks_timeout_s), -1, None)

    @step(steps.CHECK_ORIGIN)
    def check_partition_origin(self, request: PartitionStep) -> OriginChecked:
        """The origin's end again: past the end offset, something wrote around the gateways."""
        migration = self._migration(request)
        key = (request.topic, request.partition)
        end = self.deps.ends(request.origin, [key])[key]
        return OriginChecked(end, max(0, end - (migration.end_offset or 0)))

    def _migration(self, request: PartitionStep) -> PartitionMigration:
        found = self.deps.store.migration(PartitionId(request.topic, request.partition))
        if found is None:
            raise BindingRefused(f"{request.topic}[{request.partition}] has no migration")
        return found

    def _done(self, request: PartitionStep, name: str) -> int | None:
        """The epoch of this run's change for step ``name``, if it was committed (a retried step; its
        ledger row settled if its worker died before writing it)."""
        return self.deps.store.committed_epoch(request_id(name))

    def _partitions(self, request: PartitionStep) -> int:
        origin = self.deps.bootstrap(request.origin)
        return len(kafka.partitions(origin, lambda name: name == request.topic))
