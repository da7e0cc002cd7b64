"""Saga locks: one saga at a time may change the binding keys of an application.

Keys overlap whenever they can route one client: the application and any of its instances, topics or
groups, and an instance and a topic (the instance may use it). So the lock is the application's: two
sagas on keys of one application never block and flip at once, and the second is refused naming the
first. A saga's steps run as separate activities, possibly on different workers, so the lock cannot
belong to a ZooKeeper session. It is a persistent node ``locks/<AppID>`` naming its owner (the workflow
id), and the link and consumer groups the saga moves: the mirror's periodic group carry stands aside
for those groups while the lock is held (:mod:`switchyard.mirror.writers`).
Acquiring is idempotent for the same owner, so a retried activity finds the lock it already holds;
another owner gets :class:`LockHeld` naming the holder. Only the owner releases it.

Error handling: ZooKeeper problems raise RoutingUnavailable; the lock state is then unknown and the
caller retries the same call, which is safe.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from switchyard.errors import LockHeld, RoutingUnavailable
from switchyard.keys import BindingKey
from switchyard.model import now
from switchyard.routing.layout import Layout
from switchyard.routing.zk import children_data


@dataclass(frozen=True)
class LockInfo:
    owner: str
    acquired_at: str
    link: str = ""
    groups: tuple[str, ...] = ()


class SagaLocks:
    def __init__(self, zk: KazooClient, layout: Layout) -> None:
        self.zk = zk
        self.layout = layout

    def acquire(self, key: BindingKey, owner: str, link: str = "", groups: Iterable[str] = ()) -> None:
        path = self.layout.lock(key)
        data = json.dumps(
            {"owner": owner, "acquired_at": now().isoformat(), "link": link, "groups": sorted(groups)}
        ).encode()
        try:
            self.zk.retry(self.zk.create, path, data, makepath=True)
            return
        except NodeExistsError:
            pass
        except KazooException as exc:
            raise RoutingUnavailable(f"{key}: cannot take the lock: {exc!r}") from exc
        holder = self.holder(key)
        if holder is None:  # released in the meantime
            return self.acquire(key, owner, link, groups)
        if holder.owner != owner:
            raise LockHeld(str(key), holder.owner, holder.acquired_at)
        return None

    def release(self, key: BindingKey, owner: str) -> bool:
        """Release the lock if ``owner`` holds it; False when it does not (nobody does, or another saga:
        a saga refused at its lock step releases nothing of the saga that holds it)."""
        path = self.layout.lock(key)
        try:
            data, stat = self.zk.retry(self.zk.get, path)
            if _info(data).owner != owner:
                return False
            self.zk.retry(self.zk.delete, path, version=stat.version)
            return True
        except (NoNodeError, BadVersionError):
            return False
        except KazooException as exc:
            raise RoutingUnavailable(f"{key}: cannot release the lock: {exc!r}") from exc

    def holder(self, key: BindingKey) -> LockInfo | None:
        try:
            data, _ = self.zk.retry(self.zk.get, self.layout.lock(key))
        except NoNodeError:
            return None
        except KazooException as exc:
            raise RoutingUnavailable(f"{key}: cannot read the lock: {exc!r}") from exc
        return _info(data)

    def held(self) -> list[LockInfo]:
        """Every lock held now (a lock released while they are read is left out)."""
        return [_info(data) for data in children_data(self.zk, self.layout.folder("locks")).values()]


def _info(data: bytes) -> LockInfo:
    raw = json.loads(data)
    return LockInfo(raw["owner"], raw["acquired_at"], raw.get("link", ""), tuple(raw.get("groups", ())))
