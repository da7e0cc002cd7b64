"""`switchyard clusters ...`: the clusters bindings may point at."""

from __future__ import annotations

import click

from switchyard.cli.base import Group, actor_option, cli, config_of, reason_option, store_of
from switchyard.model import ClusterState
from switchyard.table import render


@cli.group(cls=Group)
def clusters() -> None:
    """Register clusters; shield them (the gateways stop contacting them at all)."""


@clusters.command("add")
@click.argument("cluster_id")
@click.option("--bootstrap", help="host:port[,host:port...]; default: the cluster's entry in the config.")
@actor_option
@reason_option
@click.pass_context
def add(ctx: click.Context, cluster_id: str, bootstrap: str | None, actor: str, reason: str) -> None:
    """Register CLUSTER_ID in ZooKeeper so bindings can point at it."""
    configured = config_of(ctx).clusters.get(cluster_id)
    if bootstrap is None:
        if configured is None:
            raise click.UsageError(f"{cluster_id!r} is not in the configuration: give --bootstrap")
        bootstrap = configured.bootstrap
    with store_of(ctx) as store:
        epoch = store.register_cluster(cluster_id, bootstrap, actor=actor, reason=reason)
    click.echo(f"cluster {cluster_id} registered ({bootstrap}), epoch {epoch}")


@clusters.command("list")
@click.pass_context
def list_clusters(ctx: click.Context) -> None:
    """Show the registered clusters."""
    with store_of(ctx) as store:
        snapshot = store.snapshot()
    rows = [
        (c.id, c.bootstrap, c.state, c.epoch, c.updated_at.isoformat(timespec="seconds"), c.by)
        for c in sorted(snapshot.clusters.values(), key=lambda c: c.id)
    ]
    click.echo(render(("CLUSTER", "BOOTSTRAP", "STATE", "EPOCH", "UPDATED", "BY"), rows))


def _state_command(name: str, state: ClusterState, doc: str) -> None:
    def command(ctx: click.Context, cluster_id: str, actor: str, reason: str, force: bool = False) -> None:
        with store_of(ctx) as store:
            epoch = store.set_cluster_state(cluster_id, state, actor=actor, reason=reason, force=force)
        click.echo(f"cluster {cluster_id} is {state}, epoch {epoch}")

    if state is ClusterState.ACTIVE:
        force = click.option(
            "--force", is_flag=True, help="Even if a fault migration's origin end is unknown."
        )
        command = force(command)
    decorated = click.pass_context(reason_option(actor_option(click.argument("cluster_id")(command))))
    clusters.command(name, help=doc)(decorated)


_state_command(
    "shield", ClusterState.SHIELDED,
    "Stop contacting CLUSTER_ID: the gateways answer its clients with retriable errors at once, and no "
    "binding moves onto it.",
)  # fmt: skip
_state_command("unshield", ClusterState.ACTIVE, "Let bindings move onto CLUSTER_ID again.")
