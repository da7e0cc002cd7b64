"""`switchyard switchover|switchback|failover ...` and `switchyard sagas ...`: start sagas, follow them,
decide their approvals.

A saga runs on the workers, durably; this command only starts it (its id derived from the keys, so a
second one on the same keys is refused naming the first), and with ``--wait`` shows its steps as they
happen, then its result. ``--dry-run`` prints the plan — and changes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import click

from switchyard import launch, temporal
from switchyard.cli.base import (
    KEY,
    SAGA,
    Group,
    NameType,
    actor_option,
    cli,
    config_of,
    reason_option,
    store_of,
)
from switchyard.config import Config
from switchyard.errors import SagaEnded, UnknownSaga
from switchyard.keys import BindingKey
from switchyard.launch import WORKFLOW_TYPES, SagaFailed, policy_of, ui_link
from switchyard.ledger import Ledger
from switchyard.model import BindingState
from switchyard.moves.partition import plan_partition
from switchyard.moves.topic import find_users
from switchyard.planning import plan_switch
from switchyard.routing.locks import SagaLocks
from switchyard.sagas.ids import migration_id, migration_link, partition_migration_id, saga_id
from switchyard.sagas.requests import (
    ApprovalPoint,
    Decision,
    Kind,
    MigrationRequest,
    PartitionMigrationRequest,
    Progress,
    SwitchRequest,
)
from switchyard.sagas.steps import PartitionPlanRequest, PlanRequest, UsersRequest
from switchyard.table import render

if TYPE_CHECKING:
    from temporalio.client import WorkflowHandle

T = TypeVar("T")
LINK, CLUSTER = NameType("the link id"), NameType("the cluster id")
UNKNOWN = "unknown to Temporal"
RUNNING = "running"


def _run(work: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(work)


# ---- starting sagas


def _common(command: Callable[..., None]) -> Callable[..., None]:
    """The options every saga command takes."""
    options: list[Callable[[Any], Any]] = [
        click.argument("keys", nargs=-1, required=True, type=KEY),
        click.option(
            "--link",
            type=LINK,
            help="The mirror link to drain and promote (default: the one leaving the keys' cluster).",
        ),
        click.option(
            "--to", "target", type=CLUSTER, help="The cluster to move to (default: the link's target)."
        ),
        click.option("--wait", is_flag=True, help="Follow the saga's steps until it ends."),
        click.option(
            "--dry-run", is_flag=True, help="Print the plan and what would be refused; change nothing."
        ),
        click.option(
            "--approval",
            type=click.Choice([a.value for a in ApprovalPoint]),
            help="Wait for an approval here (default: the configuration's sagas.approval).",
        ),
        actor_option,
        reason_option,
        click.pass_context,
    ]
    for option in reversed(options):
        command = option(command)
    return command


_spark = click.option(
    "--spark-verify", is_flag=True, default=None, help="Verify with the Spark job before the flip."
)
_UNKNOWN_HELP = (
    "Switch keys that no binding names and no gateway saw use anything (refused otherwise: a typo, most "
    "likely); all of the link's topics move with them, refused still where another application writes one."
)


@cli.command("switchover")
@_spark
@click.option("--force", "unknown_keys", is_flag=True, help=_UNKNOWN_HELP)
@_common
def switchover(ctx: click.Context, keys: tuple[BindingKey, ...], **options: Any) -> None:
    """Move KEYS to the standby, planned: nothing lost, nothing copied twice.

    KEYS are binding keys: orders (the application), orders@host-7 (an instance), orders#payments (a
    topic), orders##billing (a consumer group).
    """
    _start(ctx, Kind.SWITCHOVER, keys, _extra(options, "spark_verify", "unknown_keys"), **options)


@cli.command("switchback")
@_spark
@click.option("--force", "unknown_keys", is_flag=True, help=_UNKNOWN_HELP)
@_common
def switchback(ctx: click.Context, keys: tuple[BindingKey, ...], **options: Any) -> None:
    """Move KEYS back along the reverse link their switchover left, the same exact way.

    Refused (dry run included) when KEYS have no switch to return from: a move that returns nothing is
    a switchover.
    """
    _start(ctx, Kind.SWITCHBACK, keys, _extra(options, "spark_verify", "unknown_keys"), **options)


@cli.command("failover")
@click.option("--from", "source", type=CLUSTER, help="The cluster that failed (default: where the keys are).")
@click.option("--force", is_flag=True, help="Fail over although the source still answers.")
@click.option("--unknown-keys", is_flag=True, help=_UNKNOWN_HELP)
@click.option(
    "--wait-recovery", "recovery_wait_s", type=float,
    help="Seconds to wait for the old primary to come back, to measure the lost window exactly.",
)  # fmt: skip
@_common
def failover(ctx: click.Context, keys: tuple[BindingKey, ...], **options: Any) -> None:
    """Move KEYS off a cluster that is gone, at once; what the copy never got is measured."""
    extra = _extra(options, "source", "force", "recovery_wait_s", "unknown_keys")
    _start(ctx, Kind.FAILOVER, keys, extra, **options)


def _extra(options: dict[str, Any], *names: str) -> dict[str, Any]:
    """The options of one saga command (taken out of ``options``, which keeps those all of them take)."""
    return {name: options.pop(name) for name in names}


def _start(
    ctx: click.Context,
    kind: Kind,
    parsed: tuple[BindingKey, ...],
    extra: dict[str, Any],
    *,
    link: str | None,
    target: str | None,
    wait: bool,
    dry_run: bool,
    approval: str | None,
    actor: str,
    reason: str,
) -> None:
    config = config_of(ctx)
    keys = list(dict.fromkeys(str(key) for key in parsed))  # each in its one text form
    if dry_run:
        asked = PlanRequest(
            saga_id(keys), kind, keys, target, link, extra.get("source"), kind is Kind.FAILOVER,
            unknown_keys=bool(extra.get("unknown_keys")),
        )  # fmt: skip
        _dry_run(ctx, config, asked)
        return
    policy = policy_of(
        config, kind, approval=approval, spark_verify=extra.get("spark_verify"),
        recovery_wait_s=extra.get("recovery_wait_s"),
    )  # fmt: skip
    request = SwitchRequest(
        keys, target=target, link=link, source=extra.get("source"), force=bool(extra.get("force")),
        unknown_keys=bool(extra.get("unknown_keys")), actor=actor, reason=reason, policy=policy,
    )  # fmt: skip
    launch_saga(config, kind, saga_id(keys), request, wait=wait)


def launch_saga(config: Config, kind: Kind, workflow_id: str, request: object, *, wait: bool) -> None:
    _run(launch.start(config, kind, workflow_id, request))
    click.echo(f"{kind} {workflow_id} started: {ui_link(config, workflow_id)}")
    if wait:
        _run(launch.follow(config, workflow_id, click.echo))
    else:
        click.echo(f"follow it: switchyard sagas show '{workflow_id}'")


def _dry_run(ctx: click.Context, config: Config, asked: PlanRequest) -> None:
    unplanned = asked.unplanned
    with store_of(ctx) as store:
        plan = plan_switch(store, config, asked, mirror_wait_s=0)  # as things stand
    click.echo(f"{asked.kind} of {', '.join(plan.keys or asked.keys)} (dry run: nothing changes)")
    if plan.source:
        click.echo(f"  from {plan.source} to {plan.target or '?'} along link {plan.link or '?'}")
    if plan.split is not None:
        click.echo(
            f"  link {plan.split.link} is split first: {', '.join(plan.split.topics)} move to "
            f"{plan.split.new_link}, the rest stay on {plan.split.link}"
        )
    for key, epoch in sorted(plan.epochs.items()):
        click.echo(f"  key {key}: epoch {epoch or 'unbound'}")
    if plan.partitions:
        shown = ", ".join(str(p) for p in plan.partitions[:12])
        click.echo(
            f"  partitions: {shown}{' ...' if len(plan.partitions) > 12 else ''} ({len(plan.partitions)})"
        )
    for check in plan.checks:
        click.echo(f"  ok: {check}")
    if plan.refusal:
        click.echo(f"  refused: {plan.refusal}")
        ctx.exit(5)
    if unplanned:
        click.echo("  would: lock, flip and promote, shield the source, measure the loss")
    else:
        split = "split the link, " if plan.split is not None else ""
        click.echo(
            f"  would: lock, {split}block, check the fence, drain, sync groups, check, flip, reverse the link"
        )


@cli.command("migrate-topic")
@click.argument("topic", type=NameType("the topic"))
@click.option("--to", "target", type=CLUSTER, required=True, help="The cluster the topic moves to.")
@click.option(
    "--seen-within", "within_s", type=click.FloatRange(min=0, min_open=True), default=None,
    help="Seconds: applications a gateway saw use the topic this recently move with it "
    "(default: gateway.usage_window_s).",
)  # fmt: skip
@click.option(
    "--keep-source", is_flag=True, help="Keep the topic on the source (copied back), never delete it."
)
@click.option("--wait", is_flag=True, help="Follow the saga's steps until it ends.")
@click.option(
    "--dry-run", is_flag=True, help="Print who would move and what would be refused; change nothing."
)
@click.option(
    "--approval",
    type=click.Choice([a.value for a in ApprovalPoint]),
    help="Also wait for an approval in the switch (retiring the source always waits for one).",
)
@actor_option
@reason_option
@click.pass_context
def migrate_topic(  # noqa: PLR0917 - one per option
    ctx: click.Context, topic: str, target: str, within_s: float | None, keep_source: bool, wait: bool,
    dry_run: bool, approval: str | None, actor: str, reason: str,
) -> None:  # fmt: skip
    """Move TOPIC to another cluster with every application the gateways saw use it.

    Its producers' and consumers' topic keys (App#TOPIC) and their groups' keys (App##group) switch
    the planned way; the topic on the source is deleted only after an approval
    (switchyard sagas approve).
    """
    config = config_of(ctx)
    if dry_run:
        _dry_run_migration(ctx, config, topic, target, within_s)
        return
    policy = policy_of(config, Kind.MIGRATION, approval=approval)
    policy.retire_source = not keep_source
    request = MigrationRequest(topic, target, actor, reason, active_within_s=within_s, policy=policy)
    launch_saga(config, Kind.MIGRATION, migration_id(topic), request, wait=wait)


def _dry_run_migration(
    ctx: click.Context, config: Config, topic: str, target: str, within_s: float | None
) -> None:
    with store_of(ctx) as store:
        found = find_users(
            store, config, UsersRequest(topic, target, migration_link(topic, target), within_s)
        )
    click.echo(f"topic migration of {topic} to {target} (dry run: nothing changes)")
    for user in found.users:
        click.echo(f"  {user.role:<8} {user.app}{f' in group {user.group}' if user.group else ''}")
    if found.keys:
        click.echo(f"  keys that move: {', '.join(found.keys)}")
    for check in found.checks:
        click.echo(f"  ok: {check}")
    if found.refusal:
        click.echo(f"  refused: {found.refusal}")
        ctx.exit(5)
    click.echo(
        f"  would: copy {topic} along link {migration_link(topic, target)}, switch the keys, then wait "
        "for an approval to delete it on the source"
    )


@cli.command("migrate-partition")
@click.argument("topic", type=NameType("the topic"))
@click.argument("partition", type=click.IntRange(min=0))
@click.option("--to", "target", type=CLUSTER, required=True, help="The cluster the partition moves to.")
@click.option(
    "--fault", is_flag=True,
    help="The origin does not answer: take effect at once, the end offset beyond anything it acknowledged.",
)  # fmt: skip
@click.option(
    "--ignore-origin", is_flag=True,
    help="Readers never go back to the origin: below the end offset they start at the target's first record.",
)  # fmt: skip
@click.option("--wait", is_flag=True, help="Follow the saga's steps until it ends.")
@click.option(
    "--dry-run", is_flag=True, help="Print the plan's checks and what would be refused; change nothing."
)
@click.option(
    "--approval", type=click.Choice([a.value for a in ApprovalPoint]),
    help="Wait for an approval before the partition moves (any point but none).",
)  # fmt: skip
@actor_option
@reason_option
@click.pass_context
def migrate_partition(  # noqa: PLR0917 - one per option
    ctx: click.Context, topic: str, partition: int, target: str, fault: bool, ignore_origin: bool,
    wait: bool, dry_run: bool, approval: str | None, actor: str, reason: str,
) -> None:  # fmt: skip
    """Move one partition of TOPIC to another cluster at the gateways (seed 004), its records left where
    they are: its writes go to the target from its end offset on, and its readers follow (see
    docs/partition-migration.md)."""
    config = config_of(ctx)
    workflow_id = partition_migration_id(topic, partition)
    if dry_run:
        with store_of(ctx) as store:
            ask = PartitionPlanRequest(workflow_id, topic, partition, target, fault)
            plan = plan_partition(store, config, ask)
        click.echo(f"partition migration of {topic}[{partition}] to {target} (dry run: nothing changes)")
        if plan.origin:
            click.echo(f"  from {plan.origin}")
        for check in plan.checks:
            click.echo(f"  ok: {check}")
        if plan.refusal:
            click.echo(f"  refused: {plan.refusal}")
            ctx.exit(5)
        click.echo(
            "  would: hold its writes at every gateway, read the origin's end, record it, release them"
        )
        return
    policy = policy_of(config, Kind.PARTITION_MIGRATION, approval=approval)
    request = PartitionMigrationRequest(
        topic, partition, target, fault, ignore_origin, actor=actor, reason=reason, policy=policy
    )
    launch_saga(config, Kind.PARTITION_MIGRATION, workflow_id, request, wait=wait)


# ---- following and deciding


@cli.group(cls=Group)
def sagas() -> None:
    """Sagas: list them, show one, approve or reject, cancel."""


@sagas.command("list")
@click.option("--limit", type=int, default=20, show_default=True)
@click.pass_context
def list_sagas(ctx: click.Context, limit: int) -> None:
    """The newest sagas, running and ended."""
    click.echo(render(("SAGA", "KIND", "STATUS", "PHASE", "STARTED"), _run(saga_rows(config_of(ctx), limit))))


async def saga_rows(config: Config, limit: int, *, running: bool = False) -> list[tuple[str, ...]]:
    """The newest sagas (only those running, if asked): id, kind, status, phase, start."""
    client = await temporal.connect(config)
    types = ", ".join(f"'{t}'" for t in WORKFLOW_TYPES.values())
    query = f"WorkflowType IN ({types})" + (" AND ExecutionStatus = 'Running'" if running else "")
    rows: list[tuple[str, ...]] = []
    async for found in client.list_workflows(query, limit=limit):
        phase = found.search_attributes.get("SwitchyardPhase", ["-"])
        rows.append(
            (found.id, found.workflow_type, found.status.name.lower() if found.status else "-",
             str(phase[0]) if phase else "-", found.start_time.isoformat(timespec="seconds"))
        )  # fmt: skip
    return rows


@sagas.command("show")
@click.argument("saga", type=SAGA)
@click.option("--follow", is_flag=True, help="Follow the saga until it ends.")
@click.pass_context
def show(ctx: click.Context, saga: str, follow: bool) -> None:
    """A saga's steps and result, and its trail in the ledger."""
    config = config_of(ctx)
    click.echo(f"saga {saga}: {ui_link(config, saga)}")
    known = True
    try:
        known = _run(_follow(config, saga) if follow else _show_once(config, saga))
    finally:
        if not _trail(config, saga) and not known:
            raise SagaFailed(f"no saga {saga} in Temporal or in the ledger (switchyard sagas list)")


async def _follow(config: Config, saga: str) -> bool:
    await launch.follow(config, saga, click.echo)
    return True


async def _show_once(config: Config, saga: str) -> bool:
    """The saga as Temporal knows it; False when Temporal does not."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError, RPCStatusCode

    client = await temporal.connect(config)
    handle = client.get_workflow_handle(saga)
    try:
        described = await handle.describe()
    except RPCError as exc:
        if exc.status is not RPCStatusCode.NOT_FOUND:
            raise
        click.echo("  not in Temporal (never started, or its history is past the namespace's retention)")
        return False
    click.echo(f"  {described.workflow_type}: {described.status.name.lower() if described.status else '?'}")
    if described.status is WorkflowExecutionStatus.RUNNING:
        progress: Progress = await handle.query("progress", result_type=Progress)
        for step_state in progress.steps:
            detail = f"  {step_state.detail}" if step_state.detail else ""
            click.echo(f"  {step_state.name:<16} {step_state.state}{detail}")
        if progress.awaiting_approval:
            click.echo(f"  waiting for an approval {progress.awaiting_approval}")
        return True
    return await _follow(config, saga)


def _trail(config: Config, saga: str) -> bool:
    """The newest run's steps as the ledger has them: what each attempt did, even of a saga killed halfway
    or one whose Temporal history has expired."""
    ledger = Ledger.open(config.ledger_url)
    try:
        runs = ledger.saga_runs(saga, limit=1)
        steps = ledger.saga_steps(runs[0].run_id) if runs else []
    finally:
        ledger.close()
    if not runs:
        return False
    run = runs[0]
    click.echo(
        f"ledger: run {run.run_id}, {run.kind} by {run.actor} ({run.reason}), started "
        f"{run.started_at.isoformat(timespec='seconds')}, {run.outcome or 'not ended'}"
    )
    rows = [
        (f"+{(s.ended_at - run.started_at).total_seconds():.2f}s", s.step, str(s.attempt),
         f"{(s.ended_at - s.started_at).total_seconds():.2f}s", s.outcome, s.detail[:100])
        for s in steps
    ]  # fmt: skip
    click.echo(render(("ENDED", "STEP", "ATTEMPT", "TOOK", "OUTCOME", "DETAIL"), rows))
    return True


async def on_running(
    config: Config, saga: str, action: str, act: Callable[[WorkflowHandle[Any, Any]], Awaitable[T]]
) -> T:
    """``act`` on SAGA while it runs. Temporal answers "not found" both for an id it never saw and for a
    saga that has ended (and takes a cancellation of an ended one without a word), so the saga is looked
    up first: UnknownSaga or SagaEnded, like `sagas show` says, instead of Temporal's RPCError."""
    from temporalio.service import RPCError, RPCStatusCode

    client = await temporal.connect(config)
    handle = client.get_workflow_handle(saga)
    status = await _status_of(handle)
    if status == UNKNOWN:
        raise UnknownSaga(saga)
    if status != RUNNING:
        raise SagaEnded(saga, status, action)
    try:
        return await act(handle)
    except RPCError as exc:  # it ended since it was looked up
        if exc.status is not RPCStatusCode.NOT_FOUND:
            raise
        raise SagaEnded(saga, await _status_of(handle), action) from None


def _decide(approve: bool) -> Callable[..., None]:
    name = "approve" if approve else "reject"

    def decide(ctx: click.Context, saga: str, actor: str, reason: str) -> None:
        config = config_of(ctx)

        async def send(handle: WorkflowHandle[Any, Any]) -> str:
            from temporalio.client import WorkflowUpdateFailedError

            try:
                answer: str = await handle.execute_update(name, Decision(actor, reason), result_type=str)
            except WorkflowUpdateFailedError as exc:
                raise SagaFailed(f"saga {saga}: {getattr(exc.cause, 'message', exc.cause)}") from None
            return answer

        click.echo(f"saga {saga}: {_run(on_running(config, saga, name, send))}")

    return decide


for _name, _approve, _help in (
    ("approve", True, "Let SAGA go on past the point where it waits for an approval."),
    ("reject", False, "Stop SAGA where it waits for an approval; it undoes what it did."),
):
    sagas.command(_name, help=_help)(
        click.argument("saga", type=SAGA)(actor_option(reason_option(click.pass_context(_decide(_approve)))))
    )


@sagas.command("cancel")
@click.argument("saga", type=SAGA)
@click.pass_context
def cancel(ctx: click.Context, saga: str) -> None:
    """Ask SAGA to stop: before its flip it undoes what it did; after it, it finishes."""

    async def send(handle: WorkflowHandle[Any, Any]) -> None:
        await handle.cancel()

    _run(on_running(config_of(ctx), saga, "cancel", send))
    click.echo(f"saga {saga}: cancellation requested (switchyard sagas show '{saga}')")


@sagas.command("unlock")
@click.argument("keys", nargs=-1, required=True, type=KEY)
@click.pass_context
def unlock(ctx: click.Context, keys: tuple[BindingKey, ...]) -> None:
    """Release the locks on KEYS of a saga that no longer runs (one terminated from the Web UI, say).

    A saga ends by releasing its locks, even when it fails; only one stopped from outside leaves them.
    A lock whose saga still runs is kept: cancel the saga instead.
    """
    config = config_of(ctx)
    parsed = list(dict.fromkeys(keys))
    with store_of(ctx) as store:
        locks = SagaLocks(store.zk, store.layout)
        held = {key: holder for key in parsed if (holder := locks.holder(key)) is not None}
        status = {owner: _run(_status(config, owner)) for owner in {h.owner for h in held.values()}}
        running = sorted(f"{key} by saga {h.owner}" for key, h in held.items() if status[h.owner] == RUNNING)
        if running:  # nothing released: the operator meant a saga that has stopped
            raise SagaFailed(f"locked by a running saga (switchyard sagas cancel it): {'; '.join(running)}")
        for key in parsed:
            holder = held.get(key)
            if holder is None:
                click.echo(f"{key}: not locked")
                continue
            locks.release(key, holder.owner)
            click.echo(f"{key}: released the lock of saga {holder.owner} ({status[holder.owner]})")
            bound = store.binding(key)
            if bound is not None and bound.state is BindingState.BLOCKED:
                click.echo(
                    f"  {key} is still blocked on {bound.cluster} at epoch {bound.epoch}; clients get errors "
                    f"until: switchyard bindings set '{key}' {bound.cluster} --expect-epoch {bound.epoch}"
                )


async def _status(config: Config, workflow_id: str) -> str:
    """The saga's status in Temporal, in lower case; UNKNOWN when it has none."""
    client = await temporal.connect(config)
    return await _status_of(client.get_workflow_handle(workflow_id))


async def _status_of(handle: WorkflowHandle[Any, Any]) -> str:
    from temporalio.service import RPCError, RPCStatusCode

    try:
        described = await handle.describe()
    except RPCError as exc:
        if exc.status is not RPCStatusCode.NOT_FOUND:
            raise
        return UNKNOWN
    return described.status.name.lower() if described.status else "unknown"
