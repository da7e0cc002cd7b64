"""Which cluster issued each transactional id's producer id, kept in ZooKeeper
(``transactional/t-<transactional id>``) for every gateway and process.

A transactional request's producer id alone does not say which cluster's it is: producer ids are numbered
per cluster, and a carry's fresh start on the new cluster can hand out the very number (and epoch) the
id had on the old one. Asked of the coordinators, both would claim it; the gateway, which saw every
InitProducerId answer and made every carry, knows. Kept in one process's memory only, a client whose
connections land on two processes, or a gateway restarted, would be judged by the coordinators again.

A node is written when a transactional id's producer id is issued through the gateway (an InitProducerId
answer, before the client hears of it) and when the id is carried to another cluster; the last write
wins (carries of one id are one at a time per process). Nodes untouched for ``STALE_S`` are removed by
:meth:`IssuerStore.prune`: a coordinator forgets an idle transactional id after a week
(``transactional.id.expiration.ms``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import quote

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from switchyard.routing.layout import Layout
from workers.gateway.producers.store import prune_leaves

STALE_S = 7 * 24 * 3600.0


@dataclass(frozen=True)
class Issued:
    """A transactional id's producer id and epoch, and the cluster that issued them."""

    cluster: str
    producer_id: int
    epoch: int
    carried_from: tuple[int, int] | None = None
    """The producer id and epoch the client presented when the gateway carried it here (None: issued to
    the client by the cluster itself)."""
    at: float = 0.0
    """When (seconds since the epoch)."""


class IssuerStore:
    def __init__(self, zk: KazooClient, layout: Layout) -> None:
        self.zk, self.layout = zk, layout

    def load(self, transactional_id: str) -> Issued | None:
        try:
            data, _ = self.zk.get(self._path(transactional_id))
        except NoNodeError:
            return None
        try:
            raw = json.loads(data)
        except ValueError:  # not one this store wrote: as if none were stored
            return None
        carried = raw.get("carried_from")
        return Issued(
            str(raw["cluster"]),
            int(raw["producer_id"]),
            int(raw["epoch"]),
            None if carried is None else (int(carried[0]), int(carried[1])),
            float(raw.get("at", 0.0)),
        )

    def save(self, transactional_id: str, issued: Issued) -> None:
        path = self._path(transactional_id)
        data = json.dumps(
            {
                "cluster": issued.cluster,
                "producer_id": issued.producer_id,
                "epoch": issued.epoch,
                "carried_from": issued.carried_from,
                "at": issued.at,
            }
        ).encode()
        try:
            self.zk.create(path, data, makepath=True)
        except NodeExistsError:
            self.zk.set(path, data)

    def prune(self, older_than_s: float = STALE_S) -> int:
        """Remove the ids untouched for ``older_than_s``; how many."""
        return prune_leaves(self.zk, self.layout.folder("transactional"), older_than_s)

    def _path(self, transactional_id: str) -> str:
        """The id's node: named with a prefix, so that no id ("", ".", "..") names the folder itself or
        a path ZooKeeper refuses."""
        return f"{self.layout.folder('transactional')}/t-{quote(transactional_id, safe='')}"
