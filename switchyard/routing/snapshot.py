"""Reading the routing tree as of one epoch.

Every routing change advances the epoch counter in the same ZooKeeper transaction as its nodes, so a
read that finds the same counter version before and after it saw no change land in between: what it
read is exactly the tree at that epoch. Reads are issued in parallel, one tree level at a time.

A reader that holds the tree of an earlier epoch (a gateway's view) reads only what changed since: the
counter names what each of its latest epochs changed (``layout.epoch_data``). When it does not cover
every epoch since — too many changed, or a writer that names nothing (a rebuild) — the whole tree is
read. A gateway thus pays for a change of one binding among 10,000 with one read, not 10,000.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from switchyard.errors import RoutingError, RoutingUnavailable
from switchyard.ledger.kinds import KINDS, AnyKind, RoutingSnapshot
from switchyard.routing.layout import Layout

_ATTEMPTS = 50

__all__ = ["RoutingSnapshot", "read_snapshot"]


def read_snapshot(zk: KazooClient, layout: Layout, since: RoutingSnapshot | None = None) -> RoutingSnapshot:
    """The tree at the current epoch; ``since``: the tree at an earlier one, to read only what changed."""
    try:
        for _ in range(_ATTEMPTS):
            data, before = zk.get(layout.epoch)
            tree = _changed_since(zk, layout, since, json.loads(data)) if since is not None else None
            if tree is None:
                tree = _read_tree(zk, layout)
            data, after = zk.get(layout.epoch)
            if after.version == before.version:
                counter = json.loads(data)
                return RoutingSnapshot(int(counter["epoch"]), **tree, txn=str(counter.get("txn", "")))
    except NoNodeError as exc:
        raise RoutingError(f"ZooKeeper: {layout.root} has no routing layout yet") from exc
    except KazooException as exc:
        raise RoutingUnavailable(f"ZooKeeper: cannot read the routing tree: {exc!r}") from exc
    raise RoutingUnavailable(f"the routing tree kept changing through {_ATTEMPTS} reads")


def _read_tree(zk: KazooClient, layout: Layout) -> dict[str, dict[Any, Any]]:
    """Every kind's folder, one level at a time for all kinds at once: a level's data and the listing
    of the level below are read together."""
    found: dict[str, dict[Any, Any]] = {kind.name: {} for kind in KINDS}
    level: list[tuple[AnyKind, str]] = [(kind, "") for kind in KINDS]
    """Nodes to list, by kind and path relative to the kind's folder."""
    listed = _parallel(zk.get_children_async, [layout.folder(kind.name) for kind in KINDS])
    depth = 1
    while level:
        nodes = [
            (kind, f"{under}/{name}" if under else name)
            for (kind, under), names in zip(level, listed, strict=True)
            for name in names or ()
        ]
        held = [(kind, at, subject) for kind, at in nodes if (subject := kind.subject_at(at)) is not None]
        level = [(kind, at) for kind, at in nodes if depth < kind.depth]
        data = [zk.get_async(f"{layout.folder(kind.name)}/{at}") for kind, at, _ in held]
        below = [zk.get_children_async(f"{layout.folder(kind.name)}/{at}") for kind, at in level]
        for (kind, _, subject), got in zip(held, _collect(data), strict=True):
            if got is not None and got[0]:
                found[kind.name][subject] = kind.decode(subject, got[0])
        listed = _collect(below)
        depth += 1
    return found


def _changed_since(
    zk: KazooClient, layout: Layout, since: RoutingSnapshot, counter: dict[str, Any]
) -> dict[str, dict[Any, Any]] | None:
    """``since``'s tree with the nodes changed after it read again; None when the counter's history does
    not reach back to the very change ``since`` was read at (another history — a rebuild, a new
    ZooKeeper — may reuse its epoch numbers) and name every epoch after it."""
    epoch = int(counter["epoch"])
    recent = {int(e[0]): (e[1], e[2]) for e in counter.get("recent", ()) if len(e) == 3}
    known = recent.get(since.epoch)
    if epoch <= since.epoch or not since.txn or known is None or known[0] != since.txn:
        return None
    if any(e not in recent for e in range(since.epoch + 1, epoch + 1)):
        return None
    kinds = {kind.name: kind for kind in KINDS}
    wanted: dict[tuple[str, str], AnyKind] = {}
    for e in range(since.epoch + 1, epoch + 1):
        for name, segment in recent[e][1]:
            if name not in kinds:
                return None
            wanted[(name, segment)] = kinds[name]
    tree = {kind.name: dict(since.nodes(kind)) for kind in KINDS}
    reads = [
        (kind, kind.subject_at(segment), f"{layout.folder(name)}/{segment}")
        for (name, segment), kind in wanted.items()
    ]
    for (kind, subject, _), got in zip(
        reads, _parallel(zk.get_async, [path for *_, path in reads]), strict=True
    ):
        if subject is None:
            return None
        if got is None or not got[0]:
            tree[kind.name].pop(subject, None)
        else:
            tree[kind.name][subject] = kind.decode(subject, got[0])
    return tree


def _parallel(call: Callable[[str], Any], paths: Iterable[str]) -> list[Any]:
    """Issue every read at once, then collect."""
    return _collect([call(p) for p in paths])


def _collect(pending: list[Any]) -> list[Any]:
    """The results of reads issued at once; a node deleted meanwhile reads as None."""
    results = []
    for result in pending:
        try:
            results.append(result.get())
        except NoNodeError:
            results.append(None)
    return results
