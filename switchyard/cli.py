"""The `switchyard` command.

Errors Switchyard raises on purpose print as one ``error:`` line (or block) and end the command with
the error's own exit code (see :mod:`switchyard.errors`); anything else is a bug and shows its traceback.
"""

from __future__ import annotations

from typing import Any

import click

from switchyard import __version__, demo, telemetry
from switchyard.config import Config, load_config
from switchyard.errors import SwitchyardError
from switchyard.stack import ServiceStatus, Stack
from switchyard.table import render


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SwitchyardError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)


def _config(ctx: click.Context, service: str = "cli") -> Config:
    """Load the configuration once per invocation, then set up logging and telemetry from it."""
    root = ctx.find_root()
    if "config" not in root.meta:
        config = load_config(root.params.get("config_path"))
        telemetry.setup(config, service)
        root.meta["config"] = config
    loaded: Config = root.meta["config"]
    return loaded


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="Configuration file (default: $SWITCHYARD_CONFIG, then ./switchyard.yaml).",
)
@click.version_option(__version__, "-V", "--version", prog_name="switchyard")
def cli(config_path: str | None) -> None:
    """Switchyard moves Kafka clients between clusters without their help."""


@cli.command()
def version() -> None:
    """Print the version."""
    click.echo(f"switchyard {__version__}")


@cli.group(cls=_Group)
def stack() -> None:
    """The embedded stack: ZooKeeper, Temporal and one Kafka broker per cluster."""


@stack.command("up")
@click.option("--timeout", default=90.0, show_default=True, help="Seconds to wait for every service.")
@click.pass_context
def stack_up(ctx: click.Context, timeout: float) -> None:
    """Start every service that is not running yet and wait until all are healthy."""
    statuses = Stack(_config(ctx)).up(timeout_s=timeout, progress=click.echo)
    click.echo(_status_table(statuses))


@stack.command("down")
@click.pass_context
def stack_down(ctx: click.Context) -> None:
    """Stop the services this stack started (and only those)."""
    stopped = Stack(_config(ctx)).down(progress=click.echo)
    if not stopped:
        click.echo("nothing was running")


@stack.command("status")
@click.pass_context
def stack_status(ctx: click.Context) -> None:
    """Show each service, its address and health; exit 1 when any is unhealthy."""
    statuses = Stack(_config(ctx)).status()
    click.echo(_status_table(statuses))
    if not all(s.health.ok for s in statuses):
        ctx.exit(1)


@cli.command("demo")
@click.option("--records", default=1000, show_default=True, help="Records per cluster.")
@click.pass_context
def demo_command(ctx: click.Context, records: int) -> None:
    """Bring the stack up and do a produce/consume round trip on every cluster."""
    config = _config(ctx)
    demo.run(config, count=records, say=click.echo)
    click.echo("")
    click.echo(_status_table(Stack(config).status()))
    where = f" --config {config.source}" if config.source else ""
    click.echo(f"\nThe stack keeps running. Stop it with: make down  (or: switchyard{where} stack down)")


def _status_table(statuses: list[ServiceStatus]) -> str:
    rows = [
        (
            s.name,
            s.link or s.address,
            s.pid or "-",
            "ok" if s.health.ok else "DOWN",
            s.health.detail,
        )
        for s in statuses
    ]
    return render(("SERVICE", "ADDRESS", "PID", "HEALTH", "DETAIL"), rows)


def main() -> None:
    cli(prog_name="switchyard")
