"""Where everything lives in ZooKeeper, under the configured root (default ``/switchyard``)::

epoch                       {epoch, txn, at}: the counter every routing change advances
clusters/<id>               {bootstrap, state, epoch, updated_at, by}
bindings/<AppID>            {cluster, epoch, state, updated_at, by}; empty when only finer keys exist
bindings/<AppID>/instances|topics|groups/<name>
gateways/<id>               ephemeral: {applied_epoch, stale, host, pid, started_at}
usage/<gateway id>          ephemeral: which identities used which topics and groups, when (usage.py)
acked/<gateway id>          how far each partition's writes were acknowledged through it (acked.py)
producers/<identity>/<id>   an idempotent producer's route: the cluster that issued its id, where its
                            batches go now and as whom (workers/gateway/producers/store.py)
transactional/t-<txn id>    the cluster that issued a transactional id's producer id, and the carry that
                            took it there (workers/gateway/producers/issuers.py)
links/<id>                  mirror link: {source, target, include, exclude, state, reverse_of, epoch, ...}
links/<id>/members/<member> ephemeral: one mirror process's partitions and their status
migrations/<topic>/<partition>
locks/<AppID>               saga locks: {owner, acquired_at, link, groups}
group-writers/<link id>     a lock recipe: one writer of a link's group offsets at a time
txns/<txn id>               "committed" or "aborted": the outcome of a routing change (see store.py)
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError

from switchyard.errors import RoutingUnavailable
from switchyard.keys import BindingKey
from switchyard.ledger.kinds import BINDINGS, CLUSTERS, LINKS, AnyKind
from switchyard.model import now

FOLDERS = (
    "clusters",
    "bindings",
    "gateways",
    "links",
    "migrations",
    "locks",
    "txns",
    "vnodes",
    "usage",
    "acked",
    "producers",
    "transactional",
)


@dataclass(frozen=True)
class Layout:
    root: str

    @property
    def epoch(self) -> str:
        return f"{self.root}/epoch"

    def folder(self, name: str) -> str:
        return f"{self.root}/{name}"

    def node(self, kind: AnyKind, subject: Any) -> str:
        """Where a routing node of ``kind`` lives."""
        return f"{self.root}/{kind.name}/{kind.segment(subject)}"

    def binding(self, key: BindingKey) -> str:
        return self.node(BINDINGS, key)

    def cluster(self, cluster_id: str) -> str:
        return self.node(CLUSTERS, cluster_id)

    def link(self, link_id: str) -> str:
        return self.node(LINKS, link_id)

    def usage(self, gateway_id: str) -> str:
        return f"{self.root}/usage/{quote(gateway_id, safe='')}"

    def acked(self, gateway_id: str) -> str:
        return f"{self.root}/acked/{quote(gateway_id, safe='')}"

    def gateway(self, gateway_id: str) -> str:
        return f"{self.root}/gateways/{quote(gateway_id, safe='')}"

    def lock(self, key: BindingKey) -> str:
        """A key's saga lock: its application's, since any two keys of one application can route the
        same client (an instance that uses a topic, a request that falls back to the AppID)."""
        return f"{self.root}/locks/{quote(key.app, safe='')}"

    def group_writer(self, link_id: str) -> str:
        """Where the writers of a link's group offsets take turns (a ZooKeeper lock recipe)."""
        return f"{self.root}/group-writers/{quote(link_id, safe='')}"

    def txn(self, txn_id: str) -> str:
        return f"{self.root}/txns/{txn_id}"


RECENT_BYTES = 256 * 1024
"""How much of the epoch counter the history of changes may take (ZooKeeper's requests are at most 1 MB,
and every routing change carries the counter)."""


def epoch_data(epoch: int, txn_id: str, at: datetime, recent: list[list[Any]] | None = None) -> bytes:
    """The epoch counter's data. ``recent``: ``[epoch, txn, [[kind, segment], ...]]`` for the latest
    epochs, what each change wrote, so that a reader holding the tree of an epoch among them reads only
    the nodes changed since (``read_snapshot``). A writer that leaves it out (a rebuild, a new layout)
    makes readers read the whole tree."""
    data: dict[str, Any] = {"epoch": epoch, "txn": txn_id, "at": at.isoformat()}
    if recent:
        data["recent"] = recent
    return json.dumps(data).encode()


def remember_changes(old_data: bytes, epoch: int, txn_id: str, changed: list[list[str]]) -> list[list[Any]]:
    """The ``recent`` list after change ``txn_id`` wrote ``changed`` at ``epoch``: the counter's earlier
    list with it added, the oldest epochs dropped past RECENT_BYTES (none kept when this one alone
    passes it)."""
    entry = [epoch, txn_id, changed]
    size = len(json.dumps(entry))
    if size > RECENT_BYTES:
        return []
    try:
        earlier = [e for e in json.loads(old_data).get("recent", []) if len(e) == 3]
    except (ValueError, AttributeError, TypeError):
        earlier = []
    recent = [*earlier, entry]
    total = len(json.dumps(recent))
    dropped = 0
    while total > RECENT_BYTES:
        total -= len(json.dumps(recent[dropped])) + 2  # the entry and its separator
        dropped += 1
    return recent[dropped:]


def ensure_layout(zk: KazooClient, layout: Layout) -> None:
    """Create the folders and the epoch counter if they are missing (any process may, first)."""
    try:
        for name in FOLDERS:
            zk.ensure_path(layout.folder(name))
        if zk.exists(layout.epoch) is None:
            with contextlib.suppress(NodeExistsError):  # another process created it first
                zk.create(layout.epoch, epoch_data(0, "", now()))
    except KazooException as exc:
        raise RoutingUnavailable(f"ZooKeeper: cannot create the layout under {layout.root}: {exc!r}") from exc
