"""`switchyard migrations ...`: partition migrations (seed 004) — which partitions moved where, at what end
offset, and each one's history. Started with `switchyard migrate-partition`."""

from __future__ import annotations

import click

from switchyard.cli.base import Group, NameType, actor_option, cli, config_of, reason_option, store_of
from switchyard.cli.sagas import launch_saga
from switchyard.ledger.kinds import MIGRATIONS
from switchyard.model import MigrationState, PartitionId, PartitionMigration
from switchyard.moves.partition_aging import age_migrations, record_origin_ends, retirable
from switchyard.routing import MigrationChange
from switchyard.sagas.ids import origin_retirement_id
from switchyard.sagas.requests import Kind, OriginRetirementRequest
from switchyard.table import render


@cli.group(cls=Group)
def migrations() -> None:
    """Partition migrations: list them, show one, check them (origin ends, aging), retire an origin
    topic, call one off."""


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
    """What the scheduled aging check does, now: record the true end of each fault migration's origin
    that answers again, age each migration whose origin holds nothing below its end any more, and name
    the origin topics nothing reads (retire them with `switchyard migrations retire`)."""
    config = config_of(ctx)
    with store_of(ctx) as store:
        ends = record_origin_ends(store, config, actor=actor)
        aging = age_migrations(store, config, actor=actor)
        ripe, held = retirable(store, config)
    for line in [e.describe() for e in ends] + [a.describe() for a in aging] + [t.describe() for t in ripe]:
        click.echo(line)
    for line in held:
        click.echo(line)
    if not (ends or aging):
        click.echo("no migration in effect waits for its origin's end or for aging")


@migrations.command("retire")
@click.argument("origin", type=NameType("the cluster"))
@click.argument("topic", type=NameType("the topic"))
@click.option("--wait", is_flag=True, help="Follow the saga until it ends.")
@actor_option
@reason_option
@click.pass_context
def retire(  # noqa: PLR0917 - one per option
    ctx: click.Context, origin: str, topic: str, wait: bool, actor: str, reason: str
) -> None:
    """Delete TOPIC from ORIGIN once every partition of it was migrated away and aged (nothing reads it
    there): a saga that checks, waits for an approval, checks again and deletes."""
    config = config_of(ctx)
    if origin not in config.clusters:
        raise click.BadParameter(f"{origin!r} is not a configured cluster", param_hint="ORIGIN")
    timeout = config.sagas.approval_timeout_s
    request = OriginRetirementRequest(origin, topic, timeout, actor=actor, reason=reason)
    launch_saga(config, Kind.ORIGIN_RETIREMENT, origin_retirement_id(origin, topic), request, wait=wait)


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
