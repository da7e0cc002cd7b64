"""`switchyard status`: the estate at a glance — clusters, bindings, links, gateways, sagas — for the
operator who is paged and wants one screen before any command.

Each part is read on its own: ZooKeeper out of reach, or Temporal, leaves its lines saying so and the
rest is shown (exit code 1 then, so scripts notice).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import click

from switchyard.cli.base import cli, config_of, store_of
from switchyard.cli.sagas import saga_rows
from switchyard.cli.usage import span
from switchyard.config import Config, split_hostport
from switchyard.mirror.status import read_status
from switchyard.routing.gateways import registered
from switchyard.routing.snapshot import RoutingSnapshot
from switchyard.routing.store import RoutingStore
from switchyard.stack import health
from switchyard.table import render
from switchyard.usage import read_usage

PROBE_S = 2.0
TEMPORAL_S = 10.0


@cli.command("status")
@click.pass_context
def status(ctx: click.Context) -> None:
    """Clusters (reachable from here, state), bindings by cluster, links with lag, gateways with the
    epoch they applied, sagas running or waiting for an approval."""
    config = config_of(ctx)
    failed = False
    try:
        with store_of(ctx) as store:
            snapshot = store.snapshot()
            lags = {link_id: _lag(store, link_id) for link_id in snapshot.links}
            gateways = registered(store.zk, store.layout)
            window_s = config.gateway.usage_window_s
            uses = read_usage(store.zk, store.layout, within_s=window_s)
    except Exception as exc:  # the rest still helps
        click.echo(f"routing state: not read ({exc})")
        failed = True
    else:
        _clusters(config, snapshot)
        _links(snapshot, lags)
        click.echo(render(
            ("GATEWAY", "APPLIED EPOCH", "BEHIND", "HOST"),
            [(g.id, g.applied_epoch, snapshot.epoch - g.applied_epoch, f"{g.host}:{g.pid}")
             for g in sorted(gateways.values(), key=lambda g: g.id)],
        ) if gateways else "no gateway registered")  # fmt: skip
        click.echo()
        apps, topics = len({u.app for u in uses}), len({u.topic for u in uses if u.topic})
        click.echo(
            f"who uses what: {apps} applications, {topics} topics seen through the gateways within "
            f"{span(window_s)} (switchyard usage)"
        )
        click.echo()
    try:
        running = asyncio.run(asyncio.wait_for(saga_rows(config, 100, running=True), TEMPORAL_S))
    except Exception as exc:
        click.echo(f"sagas: Temporal not asked ({exc!r})")
        failed = True
    else:
        header = ("SAGA", "KIND", "STATUS", "PHASE", "STARTED")
        click.echo(render(header, running) if running else "no saga running")
    if failed:
        ctx.exit(1)


def _clusters(config: Config, snapshot: RoutingSnapshot) -> None:
    bound: Counter[tuple[str, str]] = Counter((b.cluster, str(b.state)) for b in snapshot.bindings.values())
    ids = sorted(set(snapshot.clusters) | set(config.clusters))
    with ThreadPoolExecutor(max(1, len(ids))) as probing:
        answers = dict(zip(ids, probing.map(lambda c: _reachable(config, c), ids), strict=True))
    rows = []
    for cluster_id in ids:
        registered_as = snapshot.clusters.get(cluster_id)
        keys = ", ".join(f"{n} {state}" for (c, state), n in sorted(bound.items()) if c == cluster_id)
        rows.append((
            cluster_id, registered_as.state if registered_as else "not registered", answers[cluster_id],
            keys or "-",
        ))  # fmt: skip
    click.echo(render(("CLUSTER", "STATE", "REACHABLE FROM HERE", "BINDINGS"), rows))
    click.echo()


def _reachable(config: Config, cluster_id: str) -> str:
    cluster = config.clusters.get(cluster_id)
    if cluster is None:
        return "not in the configuration"
    for address in cluster.bootstrap.split(","):
        try:
            if health.kafka(*split_hostport(address), timeout_s=PROBE_S).ok:
                return f"yes ({address})"
        except Exception as exc:  # a name that does not resolve, say: that cluster's line says so
            return f"not probed: {exc!r}"
    return f"no answer within {PROBE_S:g}s"


def _lag(store: RoutingStore, link_id: str) -> tuple[int, float, int]:
    """Records behind, seconds behind (the worst partition), partitions reported."""
    parts = [p for member in read_status(store.zk, store.layout, link_id) for p in member.partitions]
    return sum(p.lag for p in parts), max((p.lag_s for p in parts), default=0.0), len(parts)


def _links(snapshot: RoutingSnapshot, lags: dict[str, tuple[int, float, int]]) -> None:
    if not snapshot.links:
        click.echo("no link")
        click.echo()
        return
    rows = [
        (k.id, f"{k.source} -> {k.target}", k.state, lags[k.id][0], f"{lags[k.id][1]:.1f}",
         lags[k.id][2] or "none reported")
        for k in sorted(snapshot.links.values(), key=lambda k: k.id)
    ]  # fmt: skip
    click.echo(render(("LINK", "COPIES", "STATE", "LAG", "LAG S", "PARTITIONS"), rows))
    click.echo()
