"""The saga's routing steps retried after their worker died mid-write, on real ZooKeeper and Kafka.

A worker SIGKILLed between a step's ZooKeeper transaction and its ledger row leaves the change made
and the row pending. The chaos test met it at the flip: the retried flip found the link promoted and
no committed row, called it someone else's promotion, and the saga unblocked the keys on the source with
the link promoted under them; the next switch was refused ("no link copies from standby").
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.mirror import MirrorActivities
from activities.routing import RoutingActivities
from activities.transactions import TransactionActivities
from switchyard import kafka
from switchyard.config import Config
from switchyard.errors import LedgerError
from switchyard.keys import BindingKey
from switchyard.mirror.mapstore import read_link
from switchyard.model import BindingState, ClusterState, LinkState
from switchyard.routing import BindingChange, RoutingStore
from switchyard.sagas.steps import (
    BlockRequest,
    CopyCheckRequest,
    DrainRequest,
    FlipRequest,
    GroupSyncRequest,
    Partition,
    PartitionEnd,
    SettleRequest,
    UnblockRequest,
)
from tests.helpers.deps import worker_deps
from tests.helpers.records import fill_topic

ACTOR = "user:test"


@pytest.fixture
def activities(routing: RoutingStore, stack_config: Config) -> Iterator[RoutingActivities]:
    """The routing steps on dependencies of their own, as a worker builds them, on the test's root."""
    with worker_deps(routing, stack_config) as deps:
        yield RoutingActivities(deps)


def blocked_before_the_flip(
    routing: RoutingStore, app: str, topic: str, link: str, *, end: int
) -> tuple[BindingKey, FlipRequest]:
    """A link copying ``topic`` (one partition) primary -> standby, ``app`` blocked on the primary, and the
    flip a saga would then ask for, drained to ``end``."""
    routing.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="t")
    key = BindingKey.for_app(app)
    bound = routing.set_binding(key, "primary", actor=ACTOR, reason="t")
    blocked = routing.apply(
        [BindingChange(key, bound, "primary", BindingState.BLOCKED)], actor=ACTOR, reason="t"
    )
    return key, FlipRequest(
        saga_id=f"switchyard:{app}", keys=[str(key)], epochs={str(key): blocked}, source="primary",
        target="standby", link=link, ends=[PartitionEnd(topic, 0, end)],
    )  # fmt: skip


@pytest.mark.parametrize("retried", ["flip", "unblock", "block"])
def test_a_flip_whose_worker_died_before_its_ledger_row_is_found_made_when_retried(
    retried: str,
    activities: RoutingActivities,
    routing: RoutingStore,
    stack_config: Config,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app, topic, link = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("flipped", "flipped-t", "flipped-l"))
    for cluster in ("primary", "standby"):
        kafka.create_topics(stack_config.clusters[cluster].bootstrap, [topic], partitions=1)
    key, flip = blocked_before_the_flip(routing, app, topic, link, end=0)
    blocked = flip.epochs[str(key)]
    env = ActivityEnvironment()  # a run of its own: a step's request id is derived from the run's id
    env.info = dataclasses.replace(env.info, workflow_run_id=str(uuid.uuid4()))

    def lost(*_: object, **__: object) -> None:
        raise LedgerError("the worker died here")

    monkeypatch.setattr(routing.ledger, "mark_committed", lost)
    with pytest.raises(ApplicationError, match="LedgerError"):
        env.run(activities.flip_keys, flip)
    monkeypatch.undo()
    made = routing.epoch()
    assert routing.link(link).state is LinkState.PROMOTED  # type: ignore[union-attr]
    assert [t.status for t in routing.ledger.pending()] == ["pending"]

    if retried == "flip":  # the retry: its own change, not another's, and where the copy stood then
        again = env.run(activities.flip_keys, flip)
        assert (again.epoch, again.final) == (made, flip.ends)
    elif retried == "block":  # the held steps run again (a worker died before the saga heard of them)
        block = BlockRequest(flip.saga_id, flip.keys, flip.epochs, "primary", acks_timeout_s=10)
        assert env.run(activities.block_keys, block).flipped == made
    else:  # the saga gave the flip up: its compensation finds the flip made, and the saga goes forward
        unblock = UnblockRequest(flip.saga_id, flip.keys, "primary", blocked, acks_timeout_s=10)
        assert env.run(activities.unblock_keys, unblock).flipped
    assert routing.ledger.pending() == []
    assert routing.epoch() == made
    binding = routing.binding(key)
    assert binding is not None
    assert (binding.cluster, binding.state) == ("standby", BindingState.ACTIVE)


def test_the_held_steps_asked_again_on_the_sagas_worker_after_its_flip_say_it_landed_and_do_nothing(
    activities: RoutingActivities, routing: RoutingStore, stack_config: Config
) -> None:
    """A worker killed just after its flip, whose held steps had reached the saga's history up to the
    group sync, left the next worker to check the copy again: it failed on what clients wrote since, and
    the saga compensated a switch that had happened. Run as the saga's local steps again, each held step
    finds the flip made and says so, changing nothing; run as a separate activity (a failover's group
    sync after its flip), it runs."""
    app, topic, link = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("landed", "landed-t", "landed-l"))
    fill_topic(stack_config.clusters["primary"].bootstrap, topic, 3, partitions=1, size=16)
    fill_topic(stack_config.clusters["standby"].bootstrap, topic, 5, partitions=1, size=16)
    _, flip = blocked_before_the_flip(routing, app, topic, link, end=3)
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_run_id=str(uuid.uuid4()), is_local=True)
    made = env.run(activities.flip_keys, flip).epoch
    mirror, transactions = MirrorActivities(activities.deps), TransactionActivities(activities.deps)
    ends, partitions = [PartitionEnd(topic, 0, 3)], [Partition(topic, 0)]
    held = [
        (transactions.settle_transactions, SettleRequest(link, partitions, 5)),
        (mirror.drain_link, DrainRequest(link, ends, 5, partitions)),
        (mirror.sync_groups, GroupSyncRequest(link, [f"{app}-group"], 5, keys=flip.keys)),
        (mirror.check_copy, CopyCheckRequest(link, ends, fenced_at_flip=True)),
    ]
    for run, request in held:
        with pytest.raises(ApplicationError, match=f"FlipLanded: this saga's flip landed at epoch {made}"):
            env.run(run, request)
    assert routing.epoch() == made
    separate = ActivityEnvironment()
    separate.info = dataclasses.replace(env.info, is_local=False)
    synced = separate.run(mirror.sync_groups, held[2][1])
    assert (synced.written, synced.groups) == (0, []), synced  # it ran: no group had committed


def test_a_fenced_flip_whose_source_moved_since_the_drain_writes_nothing(
    activities: RoutingActivities, routing: RoutingStore, stack_config: Config
) -> None:
    """The flip closes the fence's window: a record on the source past the drained end (a writer around
    the gateway) stops it before the final positions are stored or any routing changes."""
    app, topic, link = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("fenced", "fenced-t", "fenced-l"))
    fill_topic(stack_config.clusters["primary"].bootstrap, topic, 3, partitions=1, size=16)
    fill_topic(stack_config.clusters["standby"].bootstrap, topic, 2, partitions=1, size=16)
    _, flip = blocked_before_the_flip(routing, app, topic, link, end=2)
    flip = dataclasses.replace(flip, fence=True)
    blocked = routing.epoch()
    with pytest.raises(ApplicationError, match=rf"FenceBroken.*being written: {topic}\[0\] 2 -> 3"):
        ActivityEnvironment().run(activities.flip_keys, flip)
    assert routing.epoch() == blocked
    assert routing.link(link).state is LinkState.RUNNING  # type: ignore[union-attr]
    assert read_link(stack_config.clusters["standby"].bootstrap, link).ends == {}


def test_a_failovers_flip_stores_the_copied_position_with_the_target_end_it_was_read_from(
    activities: RoutingActivities,
    routing: RoutingStore,
    stack_config: Config,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A forced failover's mirror copies until it sees the promotion: a record it copies while the flip
    reads where the copy stands must not fall between the copied position and the target end stored
    beside it. Stored (2, 3) once: the copied record at 2 was no client offset, and the first record
    written after the flip was presented at 2 (a chaos trial's Java committing group, having read the
    source's record at 2, went on at 3 and never processed it)."""
    app, topic, link = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("copying", "copying-t", "copying-l"))
    standby = stack_config.clusters["standby"].bootstrap
    fill_topic(stack_config.clusters["primary"].bootstrap, topic, 3, partitions=1, size=16)
    fill_topic(standby, topic, 2, partitions=1, size=16)
    _, flip = blocked_before_the_flip(routing, app, topic, link, end=0)
    flip = dataclasses.replace(flip, ends=[])  # a failover's: where the copy stands is read from the target
    read = activities.deps.ends

    def copied_meanwhile(cluster: str, keys: object) -> dict[tuple[str, int], int]:
        found = read(cluster, keys)  # type: ignore[arg-type]
        monkeypatch.setattr(activities.deps, "ends", read)
        kafka.produce(standby, topic, [kafka.Record(b"2", b"copied late")])  # the mirror's last copy
        return found

    monkeypatch.setattr(activities.deps, "ends", copied_meanwhile)
    env = ActivityEnvironment()  # a run of its own: a step's request id is derived from the run's id
    env.info = dataclasses.replace(env.info, workflow_run_id=str(uuid.uuid4()))
    flipped = env.run(activities.flip_keys, flip)
    assert flipped.final == [PartitionEnd(topic, 0, 2)]
    assert read_link(standby, link).ends == {(topic, 0): (2, 2)}


def test_a_failovers_flip_that_failed_unshields_the_source_an_earlier_attempt_shielded(
    activities: RoutingActivities,
    routing: RoutingStore,
    stack_config: Config,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failover's flip shields the source in a change of its own before it moves the keys. An attempt
    that shielded it and died, then one that failed for good: the source is used again, as before the
    failover began — the keys still bound there would otherwise be cut off. A shield of someone else's
    is left as it is."""
    app, topic, link = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("shield", "shield-t", "shield-l"))
    fill_topic(stack_config.clusters["primary"].bootstrap, topic, 3, partitions=1, size=16)
    _, flip = blocked_before_the_flip(routing, app, topic, link, end=0)
    flip = dataclasses.replace(flip, ends=[], shield_source=True)
    run = str(uuid.uuid4())

    def attempt(number: int) -> ActivityEnvironment:
        env = ActivityEnvironment()
        env.info = dataclasses.replace(env.info, workflow_run_id=run, attempt=number)
        return env

    def refused(*_: object) -> None:
        raise LedgerError("the flip failed")

    def state() -> ClusterState:
        cluster = routing.cluster("primary")
        assert cluster is not None
        return cluster.state

    try:
        attempt(1).run(activities._shield, flip)  # then its worker died
        assert state() is ClusterState.SHIELDED
        monkeypatch.setattr(activities, "_flip", refused)
        with pytest.raises((LedgerError, ApplicationError)):
            attempt(2).run(activities.flip_keys, flip)
        assert state() is ClusterState.ACTIVE
        routing.set_cluster_state("primary", ClusterState.SHIELDED, actor=ACTOR, reason="t")  # an operator's
        with pytest.raises((LedgerError, ApplicationError)):
            attempt(3).run(activities.flip_keys, flip)
        assert state() is ClusterState.SHIELDED
    finally:
        if state() is ClusterState.SHIELDED:
            routing.set_cluster_state("primary", ClusterState.ACTIVE, actor=ACTOR, reason="t")
