"""Every workflow and activity the worker runs, in one place: the worker registers these, and the
replay tests replay histories against the same workflows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from activities.aging import AgingActivities
from activities.deps import Deps
from activities.drills import DrillActivities
from activities.evacuation import EvacuationActivities
from activities.links import LinkActivities
from activities.migration import MigrationActivities
from activities.mirror import MirrorActivities
from activities.partitions import PartitionActivities
from activities.planning import PlanningActivities
from activities.records import RecordActivities
from activities.routing import RoutingActivities
from activities.transactions import TransactionActivities
from activities.verification import VerificationActivities
from workflows.aging import MigrationAging, RetireOriginTopic
from workflows.drill import Drill
from workflows.evacuation import ClusterEvacuation
from workflows.failover import Failover
from workflows.migration import TopicMigration
from workflows.partition_migration import PartitionMigration
from workflows.switchback import Switchback
from workflows.switchover import Switchover

WORKFLOWS: list[type] = [
    Switchover, Switchback, Failover, TopicMigration, PartitionMigration, Drill, MigrationAging,
    RetireOriginTopic, ClusterEvacuation,
]  # fmt: skip
ACTIVITY_CLASSES = (
    PlanningActivities,
    RoutingActivities,
    MirrorActivities,
    LinkActivities,
    TransactionActivities,
    MigrationActivities,
    PartitionActivities,
    AgingActivities,
    VerificationActivities,
    RecordActivities,
    DrillActivities,
    EvacuationActivities,
)


def activities(deps: Deps) -> list[Callable[..., Any]]:
    """Every activity method of every activities class, bound to ``deps``."""
    found = []
    for cls in ACTIVITY_CLASSES:
        instance = cls(deps)
        for name in dir(cls):
            member = getattr(instance, name)
            if callable(member) and hasattr(member, "__temporal_activity_definition"):
                found.append(member)
    return found
