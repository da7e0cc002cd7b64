"""`switchyard bindings ...`: which cluster each client identity is routed to."""

from __future__ import annotations

import click

from switchyard.cli.base import KEY, KEY_FORMS, Group, actor_option, cli, config_of, reason_option, store_of
from switchyard.identity import identify
from switchyard.keys import BindingKey
from switchyard.model import BindingState
from switchyard.resolution import resolve
from switchyard.routing.rebuild import rebuild
from switchyard.table import render


@cli.group(cls=Group)
def bindings() -> None:
    """Bind client identities to clusters; see how a client would be routed."""


@bindings.command("set", help=f"Bind KEY to CLUSTER. {KEY_FORMS}")
@click.argument("key", type=KEY)
@click.argument("cluster")
@click.option(
    "--state",
    type=click.Choice([s.value for s in (BindingState.ACTIVE, BindingState.BLOCKED)]),
    default="active",
    show_default=True,
)
@click.option("--expect-epoch", type=int, help="Fail unless KEY is still at this epoch (0: unbound).")
@click.option("--force", is_flag=True, help="Allow a shielded or down cluster.")
@actor_option
@reason_option
@click.pass_context
def set_binding(
    ctx: click.Context,
    *,
    key: BindingKey,
    cluster: str,
    state: str,
    expect_epoch: int | None,
    force: bool,
    actor: str,
    reason: str,
) -> None:
    with store_of(ctx) as store:
        before = store.binding(key)
        epoch = store.set_binding(
            key,
            cluster,
            BindingState(state),
            actor=actor,
            reason=reason,
            expected_epoch=expect_epoch,
            force=force,
        )
    was = f"{before.cluster} ({before.state})" if before else "unbound"
    click.echo(f"{key}: {was} -> {cluster} ({state}), epoch {epoch}")


@bindings.command("get", help=f"Show KEY's binding; exit 1 when it has none. {KEY_FORMS}")
@click.argument("key", type=KEY)
@click.pass_context
def get_binding(ctx: click.Context, key: BindingKey) -> None:
    with store_of(ctx) as store:
        binding = store.binding(key)
    if binding is None:
        click.echo(f"{key}: not bound")
        ctx.exit(1)
    click.echo(
        f"{key}: {binding.cluster} ({binding.state}), epoch {binding.epoch}, "
        f"by {binding.by} at {binding.updated_at.isoformat(timespec='seconds')}"
    )


@bindings.command("list")
@click.option("--app", help="Only the keys of this AppID.")
@click.pass_context
def list_bindings(ctx: click.Context, app: str | None) -> None:
    """Show every binding (as of one epoch)."""
    with store_of(ctx) as store:
        snapshot = store.snapshot()
    rows = [
        (str(k), b.cluster, b.state, b.epoch, b.updated_at.isoformat(timespec="seconds"), b.by)
        for k, b in sorted(
            snapshot.bindings.items(), key=lambda kb: (kb[0].app, kb[0].specificity, str(kb[0]))
        )
        if app is None or k.app == app
    ]
    click.echo(render(("KEY", "CLUSTER", "STATE", "EPOCH", "UPDATED", "BY"), rows))
    click.echo(f"(epoch {snapshot.epoch})")


@bindings.command("history")
@click.argument("key", type=KEY, required=False)
@click.option("--limit", default=50, show_default=True)
@click.pass_context
def history(ctx: click.Context, key: BindingKey | None, limit: int) -> None:
    """Show the ledger's binding changes, newest first; of KEY or of all keys."""
    with store_of(ctx) as store:
        events = store.ledger.history(key, limit=limit)
    rows = [
        (
            e.epoch,
            str(e.key),
            f"{e.from_cluster or '-'}/{e.from_state or '-'}",
            f"{e.to_cluster}/{e.to_state}",
            e.actor,
            e.reason,
            e.at.isoformat(timespec="seconds"),
        )
        for e in events
    ]
    click.echo(render(("EPOCH", "KEY", "FROM", "TO", "BY", "REASON", "AT"), rows))


@bindings.command("resolve")
@click.option("--user", help="SASL/PLAIN user name, if the client authenticates.")
@click.option("--client-id", help="The client's client.id.")
@click.option("--topic", "topics", multiple=True, help="A topic the request names (repeatable).")
@click.option("--group", help="The consumer group the request names.")
@click.pass_context
def resolve_command(
    ctx: click.Context, user: str | None, client_id: str | None, topics: tuple[str, ...], group: str | None
) -> None:
    """Show which cluster a request would be routed to, and why."""
    config = config_of(ctx)
    identity = identify(sasl_user=user, client_id=client_id)
    with store_of(ctx) as store:
        snapshot = store.snapshot()
    result = resolve(identity, snapshot.bindings, config.default_cluster, topics=topics, group=group)
    click.echo(f"identity: {identity}")
    click.echo(f"cluster:  {result.cluster} ({result.state})")
    click.echo(f"keys:     {', '.join(map(str, result.keys)) or '(none: default cluster)'}")
    click.echo(f"epoch:    {result.epoch} (tree at {snapshot.epoch})")
    click.echo(f"why:      {result.reason}")


@bindings.command("rebuild")
@click.option("--dry-run", is_flag=True, help="Only say what would change.")
@click.option("--force", is_flag=True, help="Even when ZooKeeper is ahead of the ledger.")
@click.pass_context
def rebuild_command(ctx: click.Context, dry_run: bool, force: bool) -> None:
    """Rewrite the ZooKeeper binding tree from the ledger's committed history."""
    with store_of(ctx) as store:
        report = rebuild(store, force=force, dry_run=dry_run)
    verb = "would write" if dry_run else "wrote"
    if report.unchanged:
        click.echo(f"ZooKeeper already matches the ledger (epoch {report.epoch})")
        return
    click.echo(
        f"{verb} {_counted(report.counts)} "
        f"at epoch {report.epoch}" + (f"; removed {', '.join(report.removed)}" if report.removed else "")
    )


@bindings.command("recover")
@click.pass_context
def recover(ctx: click.Context) -> None:
    """Settle routing changes left pending by a crash or a lost ZooKeeper session."""
    with store_of(ctx) as store:
        settled = store.recover(everything=True)
    for txn_id, outcome in settled:
        click.echo(f"{txn_id}: {outcome}")
    if not settled:
        click.echo("nothing pending")


def _counted(counts: dict[str, int]) -> str:
    """``{"links": 0, "bindings": 4}`` as "4 bindings and 0 links" (kinds by name)."""
    parts = [f"{n} {name}" for name, n in sorted(counts.items())]
    return ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else "".join(parts)
