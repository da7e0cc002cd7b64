"""Gateway registration, and the barrier a saga waits on: "every gateway has applied epoch E".

Each gateway holds an ephemeral node ``gateways/<id>`` with the highest epoch it has fully applied
(routes switched and in-flight requests to the old cluster answered). The node lives as long as the
gateway's ZooKeeper session: a gateway that dies or is cut off long enough drops out of the barrier by
itself (a live one has held its clients' requests since before: :mod:`switchyard.routing.lease`), and
one that is merely disconnected holds the barrier until it catches up or the wait times out.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import WatchedEvent

from switchyard.errors import AcksTimeout, GatewayIdInUse, RoutingUnavailable
from switchyard.model import now
from switchyard.pids import alive
from switchyard.routing.layout import Layout

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GatewayRecord:
    id: str
    applied_epoch: int
    host: str
    pid: int
    started_at: str


class GatewayRegistration:
    """This gateway's ephemeral node, re-created when a new ZooKeeper session replaces a lost one."""

    def __init__(
        self,
        zk: KazooClient,
        layout: Layout,
        gateway_id: str,
        *,
        takeover_wait_s: float = 12.0,
        registered: Callable[[], None] = lambda: None,
    ) -> None:
        """``registered``: called once the node is known to be held in a session (again)."""
        self.zk = zk
        self._registered = registered
        self.registered_in: int | None = None
        """The ZooKeeper session the node was last seen held in (None: not yet)."""
        self.takeover_wait_s = takeover_wait_s
        """How long to wait for a dead predecessor's node to go: its session timeout and a margin."""
        self.layout = layout
        self.id = gateway_id
        self.path = layout.gateway(gateway_id)
        self._applied = 0
        self._started_at = now().isoformat()
        self._lock = threading.Lock()
        self._closed = False

    def register(self) -> None:
        """Create the node. A node left under the same id by a process of this host that is gone is
        taken over at once; one of another host goes when its session expires, so that is waited for
        (``takeover_wait_s``); a holder still alive after that raises GatewayIdInUse."""
        self.zk.ensure_path(self.layout.folder("gateways"))
        deadline = time.monotonic() + self.takeover_wait_s
        while True:
            try:
                self.zk.create(self.path, self._data(), ephemeral=True)
                break
            except NodeExistsError:
                pass
            gone = threading.Event()
            stat = self.zk.exists(self.path, watch=lambda _event, signal=gone: signal.set())
            if stat is None:
                continue
            if stat.ephemeralOwner == self.zk.client_id[0]:
                self.zk.set(self.path, self._data())
                break
            if self._predecessor_dead(stat.version):
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not gone.wait(remaining):
                raise GatewayIdInUse(
                    f"gateway id {self.id!r} is registered by another live process "
                    f"(ZooKeeper session 0x{stat.ephemeralOwner:x})"
                )
        self._confirm()
        self.zk.add_listener(self._on_state)

    def _confirm(self) -> bool:
        """Note the session the node is held in, if this process's current one."""
        stat = self.zk.exists(self.path)
        client_id = self.zk.client_id
        if stat is None or client_id is None or stat.ephemeralOwner != client_id[0]:
            return False
        self.registered_in = stat.ephemeralOwner
        self._registered()
        return True

    def _predecessor_dead(self, version: int) -> bool:
        """Whether the node was left by a process of this host that is gone (a crash, a SIGKILL): then
        it is deleted, so the process started in its place serves at once rather than after the dead
        one's session expires — its clients find the port closed meanwhile. Only this host can know."""
        try:
            data, stat = self.zk.get(self.path)
            found = json.loads(data)
            host, pid = found["host"], int(found["pid"])
        except (NoNodeError, ValueError, KeyError, TypeError):
            return False  # gone meanwhile, or not a registration this code wrote
        if host != socket.gethostname() or stat.version != version:
            return False
        if pid == os.getpid() or alive(pid):
            return False
        try:
            self.zk.delete(self.path, version=stat.version)
        except (NoNodeError, BadVersionError):
            return False
        log.warning("gateway %s: took over the registration of its dead predecessor (pid %d)", self.id, pid)
        return True

    def acknowledge(self, epoch: int) -> None:
        """Record that every change up to ``epoch`` is in effect here. Epochs only go forward."""
        with self._lock:
            if epoch <= self._applied:
                return
            try:
                self.zk.set(self.path, self._data(epoch))
            except KazooException as exc:  # not applied yet: the next call writes it again
                raise RoutingUnavailable(
                    f"gateway {self.id}: cannot acknowledge epoch {epoch}: {exc!r}"
                ) from exc
            self._applied = epoch

    @property
    def applied_epoch(self) -> int:
        return self._applied

    def close(self) -> None:
        self._closed = True
        self.zk.remove_listener(self._on_state)
        with contextlib.suppress(KazooException):  # gone already, or goes with the session
            self.zk.delete(self.path)

    def _data(self, applied: int | None = None) -> bytes:
        return json.dumps(
            {
                "applied_epoch": self._applied if applied is None else applied,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "started_at": self._started_at,
            }
        ).encode()

    def _on_state(self, state: str) -> None:
        # Listeners must not block the connection thread: re-register from a thread of our own.
        if state == KazooState.CONNECTED and not self._closed:
            threading.Thread(target=self._reregister, name=f"register-{self.id}", daemon=True).start()

    def _reregister(self) -> None:
        """Until the node is held in the current session (tried again every second while connected)."""
        while not self._closed and self.zk.state == KazooState.CONNECTED:
            try:
                if self.zk.exists(self.path) is None:
                    self.zk.create(self.path, self._data(), ephemeral=True)
                    log.warning("gateway %s: registration re-created after a lost session", self.id)
            except NodeExistsError:
                pass
            except KazooException:
                log.warning("gateway %s: could not re-register; trying again", self.id, exc_info=True)
                time.sleep(1.0)
                continue
            try:
                if self._confirm():
                    return
            except KazooException:
                pass
            time.sleep(1.0)  # still held by a session that ended (its end not yet processed): again


def registered(zk: KazooClient, layout: Layout) -> dict[str, GatewayRecord]:
    records = {}
    folder = layout.folder("gateways")
    for child in zk.get_children(folder):
        try:
            data, _ = zk.get(f"{folder}/{child}")
        except NoNodeError:
            continue
        raw = json.loads(data)
        records[child] = GatewayRecord(
            child, int(raw["applied_epoch"]), raw["host"], int(raw["pid"]), raw["started_at"]
        )
    return records


def wait_for_acks(zk: KazooClient, layout: Layout, epoch: int, *, timeout_s: float) -> dict[str, int]:
    """Block until every registered gateway has applied ``epoch``; return each one's applied epoch.

    Raises AcksTimeout naming every gateway still behind when the time is up. With no gateway
    registered there is nobody to wait for, and the answer is an empty mapping.
    """
    deadline = time.monotonic() + timeout_s
    changed = threading.Event()

    def wake(_: WatchedEvent) -> None:
        changed.set()

    folder = layout.folder("gateways")
    while True:
        changed.clear()
        applied: dict[str, int] = {}
        try:
            for child in zk.get_children(folder, watch=wake):
                try:
                    data, _ = zk.get(f"{folder}/{child}", watch=wake)
                except NoNodeError:
                    continue
                applied[child] = int(json.loads(data)["applied_epoch"])
        except KazooException as exc:
            raise RoutingUnavailable(f"ZooKeeper: cannot read gateway registrations: {exc!r}") from exc
        laggards = {g: e for g, e in applied.items() if e < epoch}
        if not laggards:
            return applied
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AcksTimeout(epoch, laggards, timeout_s)
        changed.wait(remaining)
