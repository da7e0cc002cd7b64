"""The gateway's in-memory copy of the routing tree, kept current by a watch on the epoch counter.

Readers always get a whole :class:`RoutingSnapshot` as of one epoch, never a mix of two changes. When
ZooKeeper is unreachable the view keeps serving the last snapshot and says it is stale, so a gateway goes
on routing by the last known bindings but acknowledges no new epoch. After a reconnect — even with a new
session, which loses every watch — it reloads the tree and watches again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection

from kazoo.client import KazooClient, KazooState
from kazoo.protocol.states import WatchedEvent

from switchyard.errors import RoutingError
from switchyard.identity import Identity
from switchyard.resolution import Resolution, resolve
from switchyard.routing.layout import Layout
from switchyard.routing.snapshot import RoutingSnapshot, read_snapshot

log = logging.getLogger(__name__)

Listener = Callable[[RoutingSnapshot], None]


class BindingView:
    def __init__(
        self,
        zk: KazooClient,
        layout: Layout,
        default_cluster: str,
        *,
        registered_in: Callable[[], int | None] = lambda: None,
    ) -> None:
        """``registered_in``: the ZooKeeper session this process's registration is known to hold in
        (:class:`~switchyard.routing.gateways.GatewayRegistration`), for :meth:`session_of`."""
        self.zk = zk
        self.layout = layout
        self.default_cluster = default_cluster
        self._registered_in = registered_in
        self._current: tuple[RoutingSnapshot, int | None] = (RoutingSnapshot(epoch=0), None)
        self._listeners: list[Listener] = []
        self._dirty = threading.Event()
        self._stopping = threading.Event()
        self._stale = threading.Event()
        self._stale.set()
        self._loaded = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="binding-view", daemon=True)

    def start(self, *, timeout_s: float = 10.0) -> None:
        """Load the tree and begin watching; raises RoutingError when the first load does not succeed."""
        self.zk.add_listener(self._on_state)
        self._dirty.set()
        self._thread.start()
        with self._loaded:
            if not self._loaded.wait_for(lambda: not self._stale.is_set(), timeout_s):
                raise RoutingError(f"the routing tree could not be loaded within {timeout_s:g}s")

    def stop(self) -> None:
        self._stopping.set()
        self._dirty.set()
        self.zk.remove_listener(self._on_state)
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    @property
    def snapshot(self) -> RoutingSnapshot:
        return self._current[0]

    def refresh(self) -> None:
        """Read the tree again (the registration was made again: see :meth:`session_of`)."""
        self._dirty.set()

    def session_of(self, snapshot: RoutingSnapshot) -> int | None:
        """The ZooKeeper session ``snapshot``, the current one, was read in, where this process was
        registered in that session before the read began: every change since waits for its
        acknowledgement for as long as that session lives (:mod:`switchyard.routing.lease`). None for an
        older snapshot, or one read before the registration."""
        current, session = self._current
        return session if current is snapshot else None

    @property
    def stale(self) -> bool:
        """True while the view may be missing changes (ZooKeeper unreachable, or a reload pending)."""
        return self._stale.is_set()

    def on_change(self, listener: Listener) -> None:
        """Call ``listener`` with every new snapshot, and again when the view is fresh after being
        stale; from the view's own thread, in epoch order."""
        self._listeners.append(listener)

    def resolve(
        self, identity: Identity, *, topics: Collection[str] = (), group: str | None = None
    ) -> Resolution:
        return resolve(identity, self.snapshot.bindings, self.default_cluster, topics=topics, group=group)

    def wait_for_epoch(self, epoch: int, timeout_s: float) -> bool:
        with self._loaded:
            return self._loaded.wait_for(lambda: self.snapshot.epoch >= epoch, timeout_s)

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._dirty.set()  # a new session has no watches: reload and watch again
        else:
            self._stale.set()

    def _on_epoch(self, _: WatchedEvent) -> None:
        self._dirty.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._dirty.wait()
            if self._stopping.is_set():
                return
            self._dirty.clear()
            client_id = self.zk.client_id  # before the read: a session begun during it reads again
            registered = client_id is not None and self._registered_in() == client_id[0]
            try:
                self.zk.exists(self.layout.epoch, watch=self._on_epoch)
                snapshot = read_snapshot(self.zk, self.layout, since=self.snapshot)
            except Exception:  # keep serving the last snapshot; the next reconnect or watch retries
                log.warning(
                    "routing view: reload failed; serving epoch %d", self.snapshot.epoch, exc_info=True
                )
                self._stale.set()
                if self.zk.state == KazooState.CONNECTED:
                    self._stopping.wait(0.5)
                    self._dirty.set()
                continue
            self._publish(snapshot, client_id[0] if client_id and registered else None)

    def _publish(self, snapshot: RoutingSnapshot, session: int | None) -> None:
        changed = snapshot.epoch != self.snapshot.epoch or session != self._current[1]
        was_stale = self._stale.is_set()
        with self._loaded:
            self._current = (snapshot, session)
            if not self._dirty.is_set() and self.zk.state == KazooState.CONNECTED:
                self._stale.clear()
            self._loaded.notify_all()
        # Fresh again counts as news too: a gateway that held back an acknowledgement while stale
        # must hear that it can give it now, even when no change arrived meanwhile.
        if changed or (was_stale and not self._stale.is_set()):
            for listener in list(self._listeners):
                try:
                    listener(snapshot)
                except Exception:
                    log.exception("routing view: a change listener failed")
