"""Reading the whole routing tree as of one epoch.

Every routing change advances the epoch counter in the same ZooKeeper transaction as its nodes, so a
read that finds the same counter version before and after it saw no change land in between: what it
read is exactly the tree at that epoch. Reads are issued in parallel, one tree level at a time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from switchyard.errors import RoutingError, RoutingUnavailable
from switchyard.keys import BindingKey, folders
from switchyard.model import Binding, Cluster, Link
from switchyard.routing.layout import Layout

_ATTEMPTS = 50


@dataclass(frozen=True)
class RoutingSnapshot:
    epoch: int
    bindings: dict[BindingKey, Binding] = field(default_factory=dict)
    clusters: dict[str, Cluster] = field(default_factory=dict)
    links: dict[str, Link] = field(default_factory=dict)


def read_snapshot(zk: KazooClient, layout: Layout) -> RoutingSnapshot:
    try:
        for _ in range(_ATTEMPTS):
            _, before = zk.get(layout.epoch)
            snapshot = _read_tree(zk, layout)
            data, after = zk.get(layout.epoch)
            if after.version == before.version:
                return RoutingSnapshot(int(json.loads(data)["epoch"]), *snapshot)
    except NoNodeError as exc:
        raise RoutingError(f"ZooKeeper: {layout.root} has no routing layout yet") from exc
    except KazooException as exc:
        raise RoutingUnavailable(f"ZooKeeper: cannot read the routing tree: {exc!r}") from exc
    raise RoutingUnavailable(f"the routing tree kept changing through {_ATTEMPTS} reads")


def _read_tree(
    zk: KazooClient, layout: Layout
) -> tuple[dict[BindingKey, Binding], dict[str, Cluster], dict[str, Link]]:
    clusters_folder, bindings_folder = layout.folder("clusters"), layout.folder("bindings")
    links_folder = layout.folder("links")
    cluster_ids = zk.get_children(clusters_folder)
    apps = zk.get_children(bindings_folder)
    link_ids = zk.get_children(links_folder)

    cluster_data = _parallel(zk.get_async, [f"{clusters_folder}/{c}" for c in cluster_ids])
    link_data = _parallel(zk.get_async, [f"{links_folder}/{i}" for i in link_ids])
    app_paths = [f"{bindings_folder}/{a}" for a in apps]
    app_data = _parallel(zk.get_async, app_paths)
    folder_paths = [f"{p}/{f}" for p in app_paths for f in folders()]
    children = _parallel(zk.get_children_async, folder_paths)
    leaf_paths = [f"{p}/{c}" for p, names in zip(folder_paths, children, strict=True) if names for c in names]
    leaf_data = _parallel(zk.get_async, leaf_paths)

    clusters = {}
    for cid, got in zip(cluster_ids, cluster_data, strict=True):
        if got is not None and got[0]:
            clusters[unquote(cid)] = Cluster.from_json(unquote(cid), got[0])
    bindings = {}
    prefix = len(bindings_folder) + 1
    for path, got in zip(app_paths + leaf_paths, app_data + leaf_data, strict=True):
        if got is not None and got[0]:
            bindings[BindingKey.from_path(path[prefix:])] = Binding.from_json(got[0])
    links = {
        unquote(i): Link.from_json(unquote(i), got[0])
        for i, got in zip(link_ids, link_data, strict=True)
        if got is not None and got[0]
    }
    return bindings, clusters, links


def _parallel(call: Callable[[str], Any], paths: Iterable[str]) -> list[Any]:
    """Issue every read at once, then collect; a node deleted meanwhile reads as None."""
    pending = [call(p) for p in paths]
    results = []
    for result in pending:
        try:
            results.append(result.get())
        except NoNodeError:
            results.append(None)
    return results
