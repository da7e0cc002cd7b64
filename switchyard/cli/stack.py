"""`switchyard stack ...` and `switchyard demo`: the embedded stack."""

from __future__ import annotations

import click

from switchyard import demo
from switchyard.cli.base import Group, cli, config_of
from switchyard.stack import ServiceStatus, Stack
from switchyard.table import render


@cli.group(cls=Group)
def stack() -> None:
    """The embedded stack: ZooKeeper, Temporal and an Apache Kafka cluster per configured cluster."""


@stack.command("up")
@click.option("--timeout", default=90.0, show_default=True, help="Seconds to wait for every service.")
@click.pass_context
def stack_up(ctx: click.Context, timeout: float) -> None:
    """Start every service that is not running yet and wait until all are healthy."""
    statuses = Stack(config_of(ctx)).up(timeout_s=timeout, progress=click.echo)
    click.echo(status_table(statuses))


@stack.command("fetch")
@click.pass_context
def stack_fetch(ctx: click.Context) -> None:
    """Resolve the Apache Kafka versions the clusters run from Maven Central, once each (`stack up`
    does it too; afterwards nothing is downloaded)."""
    for dist in Stack(config_of(ctx)).fetch(progress=click.echo):
        click.echo(f"kafka {dist.version}: {dist.libs}")


@stack.command("down")
@click.pass_context
def stack_down(ctx: click.Context) -> None:
    """Stop the services this stack started (and only those)."""
    stopped = Stack(config_of(ctx)).down(progress=click.echo)
    if not stopped:
        click.echo("nothing was running")


@stack.command("status")
@click.pass_context
def stack_status(ctx: click.Context) -> None:
    """Show each service, its address and health; exit 1 when any is unhealthy."""
    statuses = Stack(config_of(ctx)).status()
    click.echo(status_table(statuses))
    if not all(s.health.ok for s in statuses):
        ctx.exit(1)


@cli.command("demo")
@click.option("--rate", default=500.0, show_default=True, help="Records per second the application sends.")
@click.pass_context
def demo_command(ctx: click.Context, rate: float) -> None:
    """A live switchover and switchback of an application on the embedded stack, and what it saw."""
    config = config_of(ctx)
    demo.run(config, rate_per_s=rate, say=click.echo)
    where = f" --config {config.source}" if config.source else ""
    click.echo(
        "\nThe stack, the gateway, the mirror and the worker keep running (switchyard sagas list; the "
        f"Temporal UI at {config.temporal_ui_url}).\n"
        f"Stop them with: make down  (or: switchyard{where} stack down)"
    )


def status_table(statuses: list[ServiceStatus]) -> str:
    rows = [
        (s.name, s.link or s.address, s.pid or "-", "ok" if s.health.ok else "DOWN", s.health.detail)
        for s in statuses
    ]
    return render(("SERVICE", "ADDRESS", "PID", "HEALTH", "DETAIL"), rows)
