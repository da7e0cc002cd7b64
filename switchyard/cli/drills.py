"""`switchyard drill ...`: DR drills on a schedule — a canary application of the drill's own switched over
and back between the clusters of a link, judged by what it saw (``switchyard report`` reads the result).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import click

from switchyard import launch
from switchyard.cli.base import KEY, Group, actor_option, cli, config_of, link_of, store_of
from switchyard.drills import schedules
from switchyard.durations import format_clock, format_duration, parse_clock, parse_duration
from switchyard.keys import BindingKey
from switchyard.model import LinkState
from switchyard.sagas.drills import DrillRequest, Objectives, drill_app, drill_topic
from switchyard.sagas.requests import Kind
from switchyard.table import render


class _Parsed(click.ParamType[Any]):
    def __init__(self, name: str, parse: Any) -> None:
        self.name, self._parse = name, parse

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self._parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION, CLOCK = _Parsed("DURATION", parse_duration), _Parsed("HH:MM", parse_clock)


class _Name(click.ParamType[Any]):
    name = "NAME"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return schedules.check_name(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


NAME = _Name()


@cli.group(cls=Group)
def drill() -> None:
    """Scheduled DR drills: a canary switched over and back, judged against the objectives."""


@drill.command("schedule")
@click.argument("name", type=NAME)
@click.option("--link", required=True, help="The link whose two clusters the drill switches between.")
@click.option(
    "--every", type=DURATION, help="How often (1d, 12h, 30m); without it, only `drill run` fires it."
)
@click.option("--at", "at", type=CLOCK, help="With --every: the time of day it fires, HH:MM in UTC.")
@click.option("--rate", type=click.FloatRange(min=1, max=10_000), help="Canary records per second.")
@click.option("--partitions", type=click.IntRange(1, 64), default=3, show_default=True)
@click.option("--bootstrap", default="", help="Where the canary connects (default: the configured gateway).")
@click.option("--spark/--no-spark", "spark", default=None, help="Verify both copies with the Spark job.")
@click.option("--rto", type=DURATION, help="Objective: each switch's RTO at most this.")
@click.option("--pause", type=DURATION, help="Objective: the canary producer's longest wait at most this.")
@click.option("--rpo-records", type=click.IntRange(min=0), help="Objective: acknowledged records lost.")
@click.option(
    "--key", "keys", multiple=True, type=KEY,
    help="An application's binding key to switch over and back too, after the canary (repeatable; needs "
    "--on-application-keys; each of its switches waits for an approval).",
)  # fmt: skip
@click.option(
    "--on-application-keys", "on_application_keys", is_flag=True,
    help="Yes: this drill moves real applications' keys (--key), with an approval before each switch.",
)  # fmt: skip
@actor_option
@click.pass_context
def schedule(  # noqa: PLR0917 - one option each
    ctx: click.Context,
    name: str,
    link: str,
    every: timedelta | None,
    at: timedelta | None,
    rate: float | None,
    partitions: int,
    bootstrap: str,
    spark: bool | None,
    rto: timedelta | None,
    pause: timedelta | None,
    rpo_records: int | None,
    keys: tuple[BindingKey, ...],
    on_application_keys: bool,
    actor: str,
) -> None:
    """Schedule drill NAME (a firing while the last run goes on is skipped)."""
    if bool(keys) != on_application_keys:
        raise click.UsageError(
            "--key moves real applications: give --on-application-keys with it"
            if keys
            else "--on-application-keys names no key: give them with --key"
        )
    if at is not None and every is None:
        raise click.BadParameter("needs --every (e.g. --every 1d --at 02:30)", param_hint="--at")
    if at is not None and every is not None and at >= every:
        raise click.BadParameter(f"{at} is not within --every {every}", param_hint="--at")
    config = config_of(ctx)
    if every is not None and every < timedelta(seconds=1):
        raise click.BadParameter("at least 1s", param_hint="--every")
    with store_of(ctx) as store:  # refused now, not at 2 a.m.
        exercised = link_of(store, link)
        sample = drill_topic(name, "0123abcd")
        overlapping = [
            other.id for other in store.snapshot().links.values()
            if other.target == exercised.target and other.state is not LinkState.PROMOTED
            and other.copies(sample)
        ]  # fmt: skip
    if overlapping:
        raise click.UsageError(
            f"link {', '.join(overlapping)} would copy the drill's topics ({drill_app(name)}-*) to "
            f"{exercised.target} too, beside the drill's own link: exclude them from it (its exclude "
            f"list: '{drill_app(name)}-.*', or 'drill-.*' for every drill)"
        )
    defaults = config.drills
    request = DrillRequest(
        name,
        link,
        rate_per_s=rate or defaults.rate_per_s,
        partitions=partitions,
        bootstrap=bootstrap,
        spark_verify=defaults.spark_verify if spark is None else spark,
        objectives=Objectives(
            rto_s=rto.total_seconds() if rto else defaults.objectives.rto_s,
            pause_s=pause.total_seconds() if pause else defaults.objectives.pause_s,
            rpo_records=defaults.objectives.rpo_records if rpo_records is None else rpo_records,
        ),
        policy=launch.policy_of(config, Kind.SWITCHOVER, approval="none"),
        keys=[str(key) for key in keys],
        actor=actor,
        reason=f"drill {name}",
    )
    asyncio.run(schedules.create(config, request, every=every, offset=at))
    when = _fires(every, at)
    click.echo(f"drill {name} scheduled {when}: switchyard drill run {name} fires it now")


@drill.command("run")
@click.argument("name", type=NAME)
@click.option("--wait", is_flag=True, help="Follow the drill's steps until it ends, then print its verdict.")
@click.pass_context
def run(ctx: click.Context, name: str, wait: bool) -> None:
    """Fire drill NAME now (refused while a run of it is going)."""
    config = config_of(ctx)
    workflow_id = asyncio.run(schedules.trigger(config, name))
    click.echo(f"drill {name} running: {workflow_id}  {launch.ui_link(config, workflow_id)}")
    if not wait:
        click.echo(f"its report, once it ends: switchyard report {workflow_id}")
        return
    ended = asyncio.run(launch.follow(config, workflow_id, click.echo, describe=describe))
    if ended.get("outcome") != "passed":
        ctx.exit(8)


def _fires(every: timedelta | None, at: timedelta | None) -> str:
    if every is None:
        return "when run by hand"
    return f"every {format_duration(every)}" + (f" at {format_clock(at)} UTC" if at else "")


def describe(result: dict[str, Any]) -> list[str]:
    """A drill's result in a few lines; the report has the rest."""
    lines = [f"drill {result['drill']} {result['outcome']}: {result.get('detail', '')}"]
    for saga in result.get("sagas", []):
        lines.append(
            f"  {saga['kind']} {saga['outcome']}: RTO {saga.get('rto_ms', 0) / 1000:.2f}s, clients held "
            f"{saga.get('pause_ms', 0) / 1000:.2f}s"
        )
    lines.append(f"  switchyard report {result['saga_id']}")
    return lines


@drill.command("list")
@click.pass_context
def list_drills(ctx: click.Context) -> None:
    """Every scheduled drill: when it fires, whether it is paused or running."""
    found = asyncio.run(schedules.listed(config_of(ctx)))
    if not found:
        click.echo("no drill scheduled (switchyard drill schedule NAME --link LINK --every 1d)")
        return
    rows = []
    for d in found:
        when = _fires(d.every, d.offset)
        state = "paused" if d.paused else "active"
        rows.append((
            d.name, d.request.link if d.request else "?", when, f"{state}: {d.note}" if d.paused else state,
            ", ".join(d.running) or "-", d.next_at.isoformat(timespec="seconds") if d.next_at else "-",
            d.fired, d.skipped,
        ))  # fmt: skip
    click.echo(render(("DRILL", "LINK", "FIRES", "STATE", "RUNNING", "NEXT", "FIRED", "SKIPPED"), rows))


@drill.command("pause")
@click.argument("name", type=NAME)
@click.option("--reason", default="paused by hand", show_default=True, help="Shown with the schedule.")
@click.pass_context
def pause_drill(ctx: click.Context, name: str, reason: str) -> None:
    """Stop firing drill NAME (a run going on finishes)."""
    asyncio.run(schedules.pause(config_of(ctx), name, note=reason))
    click.echo(f"drill {name} paused: switchyard drill resume {name}")


@drill.command("resume")
@click.argument("name", type=NAME)
@click.pass_context
def resume_drill(ctx: click.Context, name: str) -> None:
    """Fire drill NAME on its schedule again."""
    asyncio.run(schedules.pause(config_of(ctx), name, note="resumed", resume=True))
    click.echo(f"drill {name} resumed")


@drill.command("delete")
@click.argument("name", type=NAME)
@click.pass_context
def delete_drill(ctx: click.Context, name: str) -> None:
    """Delete drill NAME's schedule (its reports stay in the ledger)."""
    asyncio.run(schedules.delete(config_of(ctx), name))
    click.echo(f"drill {name} deleted")
