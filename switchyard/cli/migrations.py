"""`switchyard migrations ...`: partition migrations (seed 004) — which partitions moved where, at what end
offset, and each one's history. Started with `switchyard migrate-partition`."""

from __future__ import annotations

import click

from switchyard.cli.base import Group, NameType, actor_option, cli, config_of, reason_option, store_of
from switchyard.ledger.kinds import MIGRATIONS
from switchyard.migration_checks import record_origin_ends
from switchyard.model import MigrationState, PartitionId, PartitionMigration
from switchyard.routing import MigrationChange
from switchyard.table import render


@cli.group(cls=Group)
def migrations() -> None:
    """Partition migrations: list them, show one, record a returned origin's end, call one off."""


@migrations.command("list")
@click.pass_context
def list_migrations(ctx: click.Context) -> None:
    """Every partition migration in the routing tree."""
    with store_of(ctx) as store:
        snapshot = store.snapshot()
    rows = [_row(m) for _, m in sorted(snapshot.migrations.items())]
    headers = ("PARTITION", "ORIGIN", "TARGET", "KIND", "STATE", "END OFFSET", "ORIGIN END", "IGNORE ORIGIN",
               "EPOCH", "BY")  # fmt: skip
    click.echo(render(headers, rows))
    click.echo(f"(epoch {snapshot.epoch})")


@migrations.command("show")
@click.argument("topic", type=NameType("the topic"))
@click.argument("partition", type=click.IntRange(min=0))
@click.pass_context
def show(ctx: click.Context, topic: str, partition: int) -> None:
    """One partition's migration: where its client offsets lead, and its history."""
    key = PartitionId(topic, partition)
    with store_of(ctx) as store:
        migration = store.migration(key)
        history = store.ledger.events(MIGRATIONS, key)
    if migration is None and not history:
        raise click.ClickException(f"{key} has no migration")
    if migration is not None:
        click.echo(f"{key}: {migration.state}, {migration.origin} -> {migration.target} ({migration.mode})")
        for line in _meaning(migration):
            click.echo(f"  {line}")
    else:
        click.echo(f"{key}: no migration now (called off)")
    click.echo("history (newest first):")
    for event in history:
        end = "" if event.end_offset is None else f", end offset {event.end_offset}"
        was = event.from_state or "-"
        click.echo(f"  epoch {event.epoch} {event.at:%Y-%m-%d %H:%M:%S} {was} -> {event.to_state}{end} "
                   f"by {event.actor}: {event.reason}")  # fmt: skip


@migrations.command("call-off")
@click.argument("topic", type=NameType("the topic"))
@click.argument("partition", type=click.IntRange(min=0))
@actor_option
@reason_option
@click.pass_context
def call_off(ctx: click.Context, topic: str, partition: int, actor: str, reason: str) -> None:
    """Remove a migration that never took effect (left migrating by a saga that is gone): the
    partition's held writes go on to its origin. One in effect cannot be (its offsets are fixed)."""
    key = PartitionId(topic, partition)
    with store_of(ctx) as store:
        migration = store.migration(key)
        if migration is None:
            raise click.ClickException(f"{key} has no migration")
        epoch = store.apply(
            [MigrationChange.of(migration, state=MigrationState.CALLED_OFF)], actor=actor, reason=reason
        )
    click.echo(f"migration of {key} called off, epoch {epoch}")


@migrations.command("check")
@actor_option
@click.pass_context
def check(ctx: click.Context, actor: str) -> None:
    """Record the true end of each fault migration's origin that answers again."""
    config = config_of(ctx)
    with store_of(ctx) as store:
        found = record_origin_ends(store, config, actor=actor)
    for origin in found:
        click.echo(origin.describe())
    if not found:
        click.echo("no fault migration waits for its origin's end")


def _meaning(migration: PartitionMigration) -> list[str]:
    """What the partition's client offsets stand for, as an operator reads it."""
    end = migration.end_offset
    if end is None:
        return ["its writes are held at the gateways while its end is read"]
    lines = [
        f"client offsets from {end} on: the target's, client offset = {end} + (target offset - "
        f"{migration.target_base})"
    ]
    if migration.ignore_origin or migration.state == "aged":
        lines.append(f"below {end}: not read (the readers start at the target's first record)")
    else:
        lines.append(f"below {end}: the origin's own offsets, read on {migration.origin}")
    if migration.origin_end is not None and migration.origin_end < end:
        lines.append(f"{migration.origin_end} to {end - 1}: a gap, no record (the origin's true end is "
                     f"{migration.origin_end})")  # fmt: skip
    elif migration.origin_end is None:
        lines.append("the origin's true end is not known yet (recorded when it answers)")
    return lines


def _row(m: PartitionMigration) -> tuple[object, ...]:
    return (m.id, m.origin, m.target, m.mode, m.state, _or_dash(m.end_offset), _or_dash(m.origin_end),
            "yes" if m.ignore_origin else "no", m.epoch, m.by)  # fmt: skip


def _or_dash(value: int | None) -> object:
    return "-" if value is None else value
