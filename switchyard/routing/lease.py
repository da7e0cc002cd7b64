"""How long a process can vouch that its ZooKeeper session is still alive, by its own clock.

A saga's barrier waits for every registered gateway (:mod:`switchyard.routing.gateways`); a gateway whose
session ends drops out of it, and the saga flips without it. A gateway cut off from ZooKeeper, or frozen,
cannot tell when that happens: it hears of the end of its session only once it reaches ZooKeeper again,
and meanwhile it would route by bindings the saga has since changed — a write acknowledged by a cluster
its application left, lost. So the gateway routes only while it can vouch for its session: the server
expires a session no sooner than its time-out after it last heard from it, and it heard from it after
this process sent the last request it answered. The lease runs from that send, for two thirds of the
session time-out (what ZooKeeper's own clients wait for an answer before they call the connection lost),
the rest a margin: the gateway looks at the lease again right before it writes a request to a broker,
and what it writes then leaves within that margin.

The session time-out is the one this process asked for: a server whose ``maxSessionTimeout`` is lower
grants less (``zookeeper.session_timeout_s`` must be within the ensemble's bounds: 4 to 40 s at the default
``tickTime`` of 2 s).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient

log = logging.getLogger(__name__)

SHARE = 2 / 3
"""Of the session time-out, how long after a request the lease lasts."""
EVERY_S = 1.0
"""How often the session is confirmed (a read of one node)."""


class SessionLease:
    def __init__(
        self,
        zk: KazooClient,
        path: str,
        session_timeout_s: float,
        *,
        regained: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``path``: a node read to confirm the session; ``regained``: called (from the lease's thread)
        when it vouches again after it could not, or for a new session."""
        self.zk, self.path = zk, path
        self.length_s = session_timeout_s * SHARE
        self._regained, self._clock = regained, clock
        self._until = float("-inf")
        self._session: int | None = None
        self._lapsed = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="session-lease", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def vouches_for(self, session: int | None) -> bool:
        """Whether ``session`` is this process's and certainly alive now."""
        return session is not None and session == self._session and self._clock() < self._until

    def confirmed(self, sent_at: float, session: int | None) -> None:
        """A request sent at ``sent_at`` (this lease's clock) was answered in ``session``."""
        if session is None:
            return
        before = self.vouches_for(session)
        if session != self._session:
            self._session, self._until = session, float("-inf")
        self._until = max(self._until, sent_at + self.length_s)
        if before or not self.vouches_for(session):  # no news (an answer too late says nothing either)
            return
        if self._lapsed:
            log.warning("ZooKeeper session 0x%x vouched for again", session)
        self._lapsed = False
        self._regained()

    def _check(self) -> None:
        """Say once when the lease runs out."""
        if self._session is not None and not self._lapsed and self._clock() >= self._until:
            self._lapsed = True
            said = "ZooKeeper unanswered for %.1fs: session 0x%x no longer vouched for"
            log.warning(said, self.length_s, self._session)

    def _run(self) -> None:
        while not self._stopping.is_set():
            sent_at = self._clock()
            try:
                self._confirm(sent_at)
            except Exception:  # never the end of the thread: unvouched for good, the gateway would hold all
                log.exception("session lease: a confirmation failed")
            self._check()
            self._stopping.wait(max(0.0, sent_at + EVERY_S - self._clock()))

    def _confirm(self, sent_at: float) -> None:
        """A sync, then a read: in an ensemble, a server cut off from its leader answers reads for a
        while after the leader has expired the session; a sync goes through the leader."""
        try:
            self.zk.sync_async(self.path).get(timeout=self.length_s)
            self.zk.exists_async(self.path).get(timeout=self.length_s)
        except Exception as exc:  # no answer: the lease runs out unless a later one comes in time
            log.debug("session lease: no answer from ZooKeeper: %r", exc)
            return
        client_id = self.zk.client_id
        self.confirmed(sent_at, client_id[0] if client_id else None)
