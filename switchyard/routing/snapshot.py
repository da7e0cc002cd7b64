"""Reading the whole routing tree as of one epoch.

Every routing change advances the epoch counter in the same ZooKeeper transaction as its nodes, so a
read that finds the same counter version before and after it saw no change land in between: what it
read is exactly the tree at that epoch. Reads are issued in parallel, one tree level at a time.
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


def read_snapshot(zk: KazooClient, layout: Layout) -> RoutingSnapshot:
    try:
        for _ in range(_ATTEMPTS):
            _, before = zk.get(layout.epoch)
            tree = _read_tree(zk, layout)
            data, after = zk.get(layout.epoch)
            if after.version == before.version:
                return RoutingSnapshot(int(json.loads(data)["epoch"]), **tree)
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
