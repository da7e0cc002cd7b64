"""`switchyard links ...`: mirror links — define, pause, resume, promote, reverse, and how far they got."""

from __future__ import annotations

import socket
from datetime import timedelta

import click

from switchyard.admins import ClusterAdmin
from switchyard.cli.base import Group, actor_option, cli, config_of, link_of, reason_option, store_of
from switchyard.mirror.control import delete_link, promote_link, reverse_link
from switchyard.mirror.groups import ends_at_flip, sync_groups
from switchyard.mirror.mapstore import read_link
from switchyard.mirror.status import drain_report, read_status
from switchyard.mirror.writers import GroupWriters
from switchyard.model import LinkState, now
from switchyard.table import render


@cli.group(cls=Group)
def links() -> None:
    """Mirror links: what is copied where, and their control."""


@links.command("create")
@click.argument("link_id")
@click.option("--source", required=True, help="The cluster copied from.")
@click.option("--target", required=True, help="The cluster copied to.")
@click.option("--include", multiple=True, default=[".*"], show_default=True, help="Topic regex (whole name).")
@click.option("--exclude", multiple=True, help="Topic regex (whole name) not to copy.")
@actor_option
@reason_option
@click.pass_context
def create(  # noqa: PLR0917 - click passes every option by position
    ctx: click.Context,
    link_id: str,
    source: str,
    target: str,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    actor: str,
    reason: str,
) -> None:
    """Define a link; running mirror processes start copying it."""
    with store_of(ctx) as store:
        epoch = store.create_link(
            link_id, source, target, include=include, exclude=exclude, actor=actor, reason=reason
        )
    click.echo(f"link {link_id} ({source} -> {target}) created, epoch {epoch}")


@links.command("list")
@click.pass_context
def list_links(ctx: click.Context) -> None:
    """Show every link and its state."""
    with store_of(ctx) as store:
        snapshot = store.snapshot()
    rows = [
        (k.id, k.source, k.target, f"invalid: {k.problem}" if k.problem else k.state, ",".join(k.include),
         ",".join(k.exclude) or "-", k.reverse_of or "-", k.epoch)
        for k in sorted(snapshot.links.values(), key=lambda k: k.id)
    ]  # fmt: skip
    click.echo(render(("LINK", "SOURCE", "TARGET", "STATE", "INCLUDE", "EXCLUDE", "REVERSES", "EPOCH"), rows))


@links.command("status")
@click.argument("link_id")
@click.pass_context
def status(ctx: click.Context, link_id: str) -> None:
    """Per partition: source end, copied position, lag, freshness — as the mirror processes report it."""
    with store_of(ctx) as store:
        members = read_status(store.zk, store.layout, link_id)
    rows = []
    for member in members:
        if member.link_error:
            click.echo(f"{member.member}: {member.link_error}", err=True)
        for note in member.notes:
            click.echo(f"{member.member}: {note}", err=True)
        for p in member.partitions:
            fetched = p.fetched_at.isoformat(timespec="seconds") if p.fetched_at else "never"
            rows.append(
                (f"{p.topic}[{p.partition}]", p.state, p.source_end, p.mirrored, p.lag, f"{p.lag_s:.1f}",
                 "yes" if p.identical else "translated", fetched, member.member, p.error or "")
            )  # fmt: skip
    if not rows:
        raise click.ClickException(f"no mirror process reports link {link_id}")
    click.echo(
        render(("PARTITION", "STATE", "SOURCE END", "MIRRORED", "LAG", "LAG S", "SAME OFFSETS", "FETCHED",
                "MEMBER", "ERROR"), sorted(rows))
    )  # fmt: skip


@links.command("drained")
@click.argument("link_id")
@click.option("--within", type=float, default=10.0, show_default=True, help="Seconds of freshness asked for.")
@click.pass_context
def drained(ctx: click.Context, link_id: str, within: float) -> None:
    """Exit 0 when every partition is copied to a source end fetched in the last --within seconds."""
    with store_of(ctx) as store:
        report = drain_report(store.zk, store.layout, link_id, since=now() - timedelta(seconds=within))
    if report.drained:
        click.echo(f"link {link_id}: drained ({len(report.partitions)} partitions)")
        return
    for line in report.waiting:
        click.echo(line, err=True)
    ctx.exit(1)


def _state_command(name: str, state: LinkState, doc: str) -> None:
    @links.command(name, help=doc)
    @click.argument("link_id")
    @actor_option
    @reason_option
    @click.pass_context
    def command(ctx: click.Context, link_id: str, actor: str, reason: str) -> None:
        with store_of(ctx) as store:
            epoch = store.set_link_state(link_id, state, actor=actor, reason=reason)
        click.echo(f"link {link_id} is {state}, epoch {epoch}")


_state_command(
    "pause", LinkState.PAUSED, "Stop copying LINK_ID where it stands; resume continues from there."
)
_state_command("resume", LinkState.RUNNING, "Copy LINK_ID again from where it stopped.")


@links.command("promote")
@click.argument("link_id")
@actor_option
@reason_option
@click.pass_context
def promote(ctx: click.Context, link_id: str, actor: str, reason: str) -> None:
    """Stop copying LINK_ID for good: its target becomes the writable copy.

    Pauses the link, waits for the mirror to stand still, stores each partition's final position
    (where the lost window and a reverse link start), then promotes.
    """
    with store_of(ctx) as store:
        epoch = promote_link(config_of(ctx), store, link_id, actor=actor, reason=reason)
    click.echo(f"link {link_id} is promoted, epoch {epoch}")


@links.command("reverse")
@click.argument("link_id")
@click.argument("new_id")
@click.option("--force", is_flag=True, help="Reverse even though the old source holds records never copied.")
@actor_option
@reason_option
@click.pass_context
def reverse(ctx: click.Context, link_id: str, new_id: str, force: bool, actor: str, reason: str) -> None:  # noqa: PLR0917
    """Create NEW_ID copying back from promoted LINK_ID's target, with the offset map turned around."""
    with store_of(ctx) as store:
        report = reverse_link(config_of(ctx), store, link_id, new_id, actor=actor, reason=reason, force=force)
    click.echo(f"link {new_id} reverses {link_id} ({report.partitions} partitions), epoch {report.epoch}")
    for (topic, partition), count in sorted(report.uncopied.items()):
        click.echo(
            f"  {topic}[{partition}]: {count} records on the old source were never copied (left there)"
        )


@links.command("delete")
@click.argument("link_id")
@click.option("--force", is_flag=True, help="Delete a running link too (its target is writable mid-copy).")
@actor_option
@reason_option
@click.pass_context
def delete(ctx: click.Context, link_id: str, force: bool, actor: str, reason: str) -> None:
    """Remove LINK_ID: mirror processes stop copying it, and its offset map on the target is removed.

    The copied topics stay on the target as they are. Refused for a running link unless forced.
    """
    with store_of(ctx) as store:
        epoch, removed = delete_link(config_of(ctx), store, link_id, actor=actor, reason=reason, force=force)
    click.echo(f"link {link_id} deleted, epoch {epoch} ({removed} offset map records removed)")


@links.command("sync-groups")
@click.argument("link_id")
@click.option("--group", "groups", multiple=True, help="Only these groups (default: every group).")
@click.pass_context
def sync_groups_command(ctx: click.Context, link_id: str, groups: tuple[str, ...]) -> None:
    """Carry consumer group offsets to the target now (after a drain: every partition is copied).

    Groups a running saga moves over this link are left to it (skipped, naming the saga)."""
    config = config_of(ctx)
    with store_of(ctx) as store:
        link = link_of(store, link_id)
        source, target = (config.clusters[c].bootstrap for c in (link.source, link.target))
        writers = GroupWriters(store.zk, store.layout, link_id, f"cli@{socket.gethostname()}")
        records = read_link(target, link_id)
        report = sync_groups(
            ClusterAdmin(source),
            ClusterAdmin(target),
            link.copies,
            records.maps,
            groups=groups or None,
            turn=writers.carry,
            rewind=bool(groups),  # named, after a drain: as a planned switch's sync
            flipped=ends_at_flip(link, records),
        )
    for written in report.written:
        click.echo(
            f"{written.group} {written.topic}[{written.partition}]: {written.source} -> {written.target}"
        )
    for reason in report.skipped:
        click.echo(f"skipped: {reason}", err=True)
    click.echo(f"{len(report.written)} offsets written, {report.unchanged} already in step")
