"""Rebuild the ZooKeeper routing tree from the ledger, after ZooKeeper lost it or was replaced.

The committed history is replayed into the tree it describes — every binding, cluster and link with the
epoch, time and author of its last change — and written over what ZooKeeper holds; bindings and
clusters the ledger does not know are removed, and the epoch counter is set to the ledger's newest
epoch, all in one ZooKeeper transaction that fails if any routing change lands meanwhile. A tree whose
epoch is *ahead* of the ledger has changes the ledger never saw: rebuilding would roll routing back, so
it is refused unless forced.
"""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.exceptions import KazooException

from switchyard.errors import BindingRefused, RoutingError, RoutingUnavailable
from switchyard.model import now
from switchyard.routing.layout import epoch_data
from switchyard.routing.snapshot import read_snapshot
from switchyard.routing.store import RoutingStore, first_failure


@dataclass(frozen=True)
class RebuildReport:
    epoch: int
    bindings: int
    clusters: int
    links: int
    removed: list[str]
    unchanged: bool


def rebuild(store: RoutingStore, *, force: bool = False, dry_run: bool = False) -> RebuildReport:
    wanted = store.ledger.state()
    store.ensure_layout()
    current = read_snapshot(store.zk, store.layout)
    if current.epoch > wanted.epoch and not force:
        raise BindingRefused(
            f"ZooKeeper is at epoch {current.epoch}, the ledger only at {wanted.epoch}: rebuilding would "
            "roll routing back (force it if ZooKeeper's newer changes are known to be wrong)"
        )
    removed = [str(k) for k in current.bindings if k not in wanted.bindings]
    removed += [f"cluster {c}" for c in current.clusters if c not in wanted.clusters]
    removed += [f"link {i}" for i in current.links if i not in wanted.links]
    unchanged = (current.epoch, current.bindings, current.clusters, current.links) == (
        wanted.epoch,
        wanted.bindings,
        wanted.clusters,
        wanted.links,
    )
    report = RebuildReport(
        wanted.epoch, len(wanted.bindings), len(wanted.clusters), len(wanted.links), removed, unchanged
    )
    if dry_run or unchanged:
        return report
    zk, layout = store.zk, store.layout
    try:
        epoch_version = zk.get(layout.epoch)[1].version
        for key in wanted.bindings:
            zk.ensure_path(layout.binding(key).rsplit("/", 1)[0])
        t = zk.transaction()
        for key in current.bindings.keys() - wanted.bindings.keys():
            t.set_data(layout.binding(key), b"")  # empty means unbound; the node may hold finer keys
        for cluster_id in current.clusters.keys() - wanted.clusters.keys():
            t.delete(layout.cluster(cluster_id))
        for link_id in current.links.keys() - wanted.links.keys():
            t.set_data(layout.link(link_id), b"")  # empty: no link (its members' status nodes may remain)
        for path, data in [
            *((layout.cluster(c.id), c.to_json()) for c in wanted.clusters.values()),
            *((layout.link(i), link.to_json()) for i, link in wanted.links.items()),
            *((layout.binding(k), b.to_json()) for k, b in wanted.bindings.items()),
        ]:
            if zk.exists(path) is None:
                t.create(path, data)
            else:
                t.set_data(path, data)
        t.set_data(layout.epoch, epoch_data(wanted.epoch, "rebuild", now()), epoch_version)
        results = t.commit()
    except KazooException as exc:
        raise RoutingUnavailable(f"ZooKeeper: rebuild failed, nothing was changed: {exc!r}") from exc
    failure = first_failure(results)
    if failure is not None:
        raise RoutingError(
            f"rebuild failed, nothing was changed (did a routing change land meanwhile?): {failure!r}"
        )
    return report
