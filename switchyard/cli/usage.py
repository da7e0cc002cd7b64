"""`switchyard usage`: who uses what, as the gateways reported it — the record a saga's plan decides from
(which topics move with a key, who would be left behind on a link it promotes)."""

from __future__ import annotations

import time

import click

from switchyard.cli.base import cli, config_of, store_of
from switchyard.table import render
from switchyard.usage import read_usage


@cli.command("usage")
@click.option("--app", help="Only this application (AppID).")
@click.option("--topic", help="Only this topic.")
@click.option(
    "--within", "within_s", type=click.FloatRange(min=0, min_open=True), default=None,
    help="Seconds: only what was seen this recently (default: gateway.usage_window_s).",
)  # fmt: skip
@click.pass_context
def usage(ctx: click.Context, app: str | None, topic: str | None, within_s: float | None) -> None:
    """The topics each application produced to or read, and the groups it worked in, with when a
    gateway last saw it — kept through gateway restarts for gateway.usage_window_s."""
    window_s = within_s or config_of(ctx).gateway.usage_window_s
    with store_of(ctx) as store:
        uses = read_usage(store.zk, store.layout, within_s=window_s)
    uses = [u for u in uses if (app is None or u.app == app) and (topic is None or u.topic == topic)]
    if not uses:
        click.echo(f"nothing seen within {span(window_s)}")
        return
    now = time.time()
    click.echo(render(
        ("APP", "INSTANCE", "TOPIC", "ROLE", "GROUP", "LAST SEEN"),
        [(u.app, u.instance or "-", u.topic or "-", u.role, u.group or "-", f"{span(now - u.last_seen)} ago")
         for u in uses],
    ))  # fmt: skip


def span(seconds: float) -> str:
    """``seconds`` the way a person reads it: 42s, 17m, 5h, 3d."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{max(seconds, 0):.0f}s"
