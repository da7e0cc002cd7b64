"""Rebuild the ZooKeeper routing tree from the ledger, after ZooKeeper lost it or was replaced.

The committed history is replayed into the tree it describes — every node of every kind with the
epoch, time and author of its last change — and written over what ZooKeeper holds; nodes the ledger
does not know are emptied (an empty node holds nothing, as after an unbinding), and the epoch counter
is set to the ledger's newest epoch, all in one ZooKeeper transaction that fails if any routing change
lands meanwhile. A tree whose epoch is *ahead* of the ledger has changes the ledger never saw:
rebuilding would roll routing back, so it is refused unless forced.
"""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.exceptions import KazooException

from switchyard.errors import BindingRefused, RoutingError, RoutingUnavailable
from switchyard.ledger.kinds import KINDS
from switchyard.model import now
from switchyard.routing.layout import epoch_data
from switchyard.routing.snapshot import read_snapshot
from switchyard.routing.store import RoutingStore, first_failure


@dataclass(frozen=True)
class RebuildReport:
    epoch: int
    counts: dict[str, int]
    """How many nodes of each kind the ledger describes (by the kind's name: ``bindings``, ...)."""
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
    removed = [kind.label(s) for kind in KINDS for s in current.nodes(kind) if s not in wanted.nodes(kind)]
    unchanged = current == wanted
    report = RebuildReport(
        wanted.epoch, {kind.name: len(wanted.nodes(kind)) for kind in KINDS}, removed, unchanged
    )
    if dry_run or unchanged:
        return report
    zk, layout = store.zk, store.layout
    try:
        epoch_version = zk.get(layout.epoch)[1].version
        for kind in KINDS:  # parents first: a node's parent may be another subject's node
            if kind.depth > 1:
                for subject in wanted.nodes(kind):
                    zk.ensure_path(layout.node(kind, subject).rsplit("/", 1)[0])
        t = zk.transaction()
        for kind in KINDS:
            for subject in current.nodes(kind).keys() - wanted.nodes(kind).keys():
                t.set_data(layout.node(kind, subject), b"")  # empty: none (it may hold others)
            for subject, node in wanted.nodes(kind).items():
                path = layout.node(kind, subject)
                if zk.exists(path) is None:
                    t.create(path, node.to_json())
                else:
                    t.set_data(path, node.to_json())
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
