"""`switchyard evacuate CLUSTER --to CLUSTER`: move a whole cluster's topics and applications, in batches
(docs/runbooks/cluster-move.md); `switchyard evacuation pause|resume|roll-back CLUSTER` between them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import yaml

from switchyard import launch
from switchyard.cli.base import Group, actor_option, cli, config_of, reason_option, store_of
from switchyard.cli.sagas import CLUSTER, _run, on_running
from switchyard.config import Config
from switchyard.launch import SagaFailed, policy_of
from switchyard.moves.cluster import plan_evacuation
from switchyard.sagas.evacuations import (
    ORDERS,
    QUIET_FIRST,
    EvacuationPlan,
    EvacuationPlanRequest,
    EvacuationRequest,
    evacuation_link,
)
from switchyard.sagas.ids import evacuation_id
from switchyard.sagas.requests import Kind
from switchyard.table import render


@cli.command("evacuate")
@click.argument("source", type=CLUSTER)
@click.option("--to", "target", type=CLUSTER, required=True, help="The cluster everything moves to.")
@click.option(
    "--batch", "batch_topics", type=click.IntRange(min=1), default=None,
    help="At most N topics a batch (an application's topics, and those of applications sharing one, stay "
    "together: such a set larger than N is a batch alone). Default: each such set a batch.",
)  # fmt: skip
@click.option(
    "--plan", "plan_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A YAML file listing the batches in order, each a list of topics (`batches: [[a, b], [c]]`).",
)  # fmt: skip
@click.option(
    "--order", type=click.Choice(ORDERS), default=QUIET_FIRST, show_default=True,
    help="Which batches go first, by the records written to their topics while the plan watched.",
)  # fmt: skip
@click.option("--approve-batches", is_flag=True, help="Wait for an approval before each batch's switch.")
@click.option("--keep-source", is_flag=True, help="Never delete the topics on the source (copied back).")
@click.option(
    "--seen-within", "within_s", type=click.FloatRange(min=0, min_open=True), default=None,
    help="Seconds: applications a gateway saw this recently are moved (default: gateway.usage_window_s).",
)  # fmt: skip
@click.option("--wait", is_flag=True, help="Follow the evacuation until it ends.")
@click.option("--dry-run", is_flag=True, help="Print the whole plan and what stops it; change nothing.")
@actor_option
@reason_option
@click.pass_context
def evacuate(  # noqa: PLR0917 - one per option
    ctx: click.Context, source: str, target: str, batch_topics: int | None, plan_file: Path | None,
    order: str, approve_batches: bool, keep_source: bool, within_s: float | None, wait: bool,
    dry_run: bool, actor: str, reason: str,
) -> None:  # fmt: skip
    """Move every topic of SOURCE, and every application the gateways saw use them, to another cluster.

    Batch by batch, each a planned switch of its applications (nothing lost, nothing read twice, no
    client reconfigured); pausable between batches (switchyard evacuation pause); the topics on SOURCE
    are deleted only after an approval (switchyard sagas approve).
    """
    if batch_topics and plan_file:
        raise click.UsageError("--batch and --plan choose the batches two ways: give one")
    config = config_of(ctx)
    batches = _plan_file(plan_file) if plan_file else []
    if dry_run:
        _dry_run(ctx, config, source, target, batch_topics or 0, order, batches, within_s)
        return
    policy = policy_of(config, Kind.EVACUATION)
    policy.retire_source = not keep_source
    request = EvacuationRequest(
        source, target, actor, reason, batch_topics=batch_topics or 0, order=order, batches=batches,
        approve_batches=approve_batches, active_within_s=within_s, policy=policy,
    )  # fmt: skip
    saga = evacuation_id(source)
    _run(launch.start(config, Kind.EVACUATION, saga, request))
    click.echo(f"{Kind.EVACUATION} {saga} started: {launch.ui_link(config, saga)}")
    if wait:
        _run(launch.follow(config, saga, click.echo))
    else:
        click.echo(f"follow it: switchyard sagas show '{saga}'")


def _plan_file(path: Path) -> list[list[str]]:
    """The batches a plan file lists, or a usage error naming the file and what is wrong."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--plan") from None
    listed = data.get("batches") if isinstance(data, dict) else data
    if not isinstance(listed, list) or not listed:
        raise click.BadParameter(f"{path}: expected `batches:`, a list of batches", param_hint="--plan")
    for number, batch in enumerate(listed, start=1):
        if not isinstance(batch, list) or not batch or not all(isinstance(t, str) and t for t in batch):
            raise click.BadParameter(
                f"{path}: batch {number} is not a list of topic names: {batch!r}", param_hint="--plan"
            )
    return [list(batch) for batch in listed]


def _dry_run(  # noqa: PLR0917 - what the plan is asked
    ctx: click.Context, config: Config, source: str, target: str, batch_topics: int, order: str,
    batches: list[list[str]], within_s: float | None,
) -> None:  # fmt: skip
    asked = EvacuationPlanRequest(evacuation_id(source), source, target, evacuation_link(source, target),
                                  batch_topics, order, batches, within_s)  # fmt: skip
    click.echo(f"evacuation of {source} to {target} (dry run: nothing changes)")
    click.echo(f"  watching {source} for {asked.watch_s:g}s for writers the gateways do not see ...")
    with store_of(ctx) as store:
        plan = plan_evacuation(store, config, asked)
    for line in describe_plan(plan):
        click.echo(line)
    if plan.cannot_move:
        ctx.exit(5)


def describe_plan(plan: EvacuationPlan) -> list[str]:
    """The plan, as lines for an operator: each batch, what is retired at the end, what stops it."""
    lines = [f"  ok: {check}" for check in plan.checks]
    rows = [
        (b.number, len(b.topics), b.partitions, b.written, ", ".join(b.apps), _short(b.topics))
        for b in plan.batches
    ]
    if rows:
        table = render(("BATCH", "TOPICS", "PARTITIONS", "WRITTEN", "APPLICATIONS", "TOPIC NAMES"), rows)
        lines += ["", *table.splitlines()]
    if plan.unused:
        lines.append(
            f"  no application seen: {_short(plan.unused)} — copied, checked exact, retired at the end"
        )
    lines += [f"  cannot move: {line}" for line in plan.cannot_move]
    if not plan.cannot_move:
        lines.append(
            f"  would: copy {len(plan.topics)} topics along {plan.link}, switch the batches in order, then "
            f"wait for an approval to delete them on {plan.source}"
        )
    return lines


def _short(names: list[str]) -> str:
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


@cli.group(cls=Group)
def evacuation() -> None:
    """A running evacuation: pause it between batches, resume it, roll its last batch back."""


def _signal(name: str, said: str) -> Any:
    def send_signal(ctx: click.Context, source: str) -> None:
        saga = evacuation_id(source)

        async def send(handle: Any) -> None:
            await handle.signal(name)

        try:
            _run(on_running(config_of(ctx), saga, name, send))
        except SagaFailed as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"evacuation {saga}: {said} (switchyard sagas show '{saga}')")

    return send_signal


for _command, _signal_name, _said, _help in (
    ("pause", "pause", "pauses before its next batch", "Stop evacuating SOURCE before the next batch."),
    ("resume", "resume", "goes on", "Go on with the evacuation of SOURCE (a failed batch is tried again)."),
    ("roll-back", "roll_back", "switches its last batch back, then pauses",
     "Switch the last batch moved back to SOURCE, then pause."),
):  # fmt: skip
    evacuation.command(_command, help=_help)(
        click.argument("source", type=CLUSTER)(click.pass_context(_signal(_signal_name, _said)))
    )
