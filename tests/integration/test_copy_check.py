"""The last check before a flip, on its own, on real Kafka: the target must hold exactly what the link
copied up to the fenced end. In a saga the drain has waited for the target to reach that end already, so
a check that let a target one record short through would pass every saga test; here nothing drains."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.deps import Deps
from activities.mirror import MirrorActivities
from switchyard.config import Config
from switchyard.routing import RoutingStore
from switchyard.routing.zk import connect
from switchyard.sagas.steps import CopyCheckRequest, PartitionEnd
from tests.helpers.records import fill_topic

COPIED = 40


@pytest.fixture
def activities(routing: RoutingStore, stack_config: Config) -> Iterator[MirrorActivities]:
    store = RoutingStore(connect(stack_config), routing.layout.root, routing.ledger)
    deps = Deps(stack_config, store.zk, routing.ledger, store)
    yield MirrorActivities(deps)
    deps.close()


@pytest.mark.parametrize(
    ("on_target", "fenced", "found"),
    [
        (COPIED, COPIED, None),
        (COPIED - 1, COPIED, f"the target holds {COPIED - 1}, fewer than the {COPIED} to copy"),
        (COPIED + 1, COPIED, f"the target holds {COPIED + 1}, more than the {COPIED} copied"),
        (COPIED, COPIED - 1, f"the source moved from {COPIED - 1} to {COPIED}"),
    ],
    ids=["exact", "one-short", "one-over", "source-moved"],
)
def test_the_check_before_the_flip_passes_an_exact_copy_and_names_any_record_off(
    on_target: int,
    fenced: int,
    found: str | None,
    activities: MirrorActivities,
    routing: RoutingStore,
    stack_config: Config,
) -> None:
    topic, link = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("checked-t", "checked-l"))
    fill_topic(stack_config.clusters["primary"].bootstrap, topic, COPIED, partitions=1, size=16)
    fill_topic(stack_config.clusters["standby"].bootstrap, topic, on_target, partitions=1, size=16)
    routing.create_link(link, "primary", "standby", include=[topic], actor="user:test", reason="t")
    check = CopyCheckRequest(link, [PartitionEnd(topic, 0, fenced)])
    if found is None:
        assert ActivityEnvironment().run(activities.check_copy, check).verdict == "clean"
    else:
        with pytest.raises(ApplicationError, match="CopyDiverged") as refused:
            ActivityEnvironment().run(activities.check_copy, check)
        assert f"{topic}[0]: {found}" in str(refused.value)
