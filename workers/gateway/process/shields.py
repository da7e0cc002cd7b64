"""When this gateway process closed each shielded (or down) cluster, and when routes last moved off it:
the clocks of what the process does for a while after a shield (see :class:`Shields`)."""

from __future__ import annotations

from switchyard.planning import effective
from switchyard.routing.snapshot import RoutingSnapshot

SHIELD_GRACE_S = 2.0
"""How long a request already at a broker of a cluster being shielded may still take to be answered
(see ``Session.drop_upstreams``): a live broker answers a write in milliseconds, a dead one never."""
SHIELD_HOLDS_S = 60.0
"""How long after a cluster is shielded its clients' writes are held for a routing change: a failover's
flip follows its shield, and waits on a target in trouble (14 s with a broker of it killed, in a chaos
trial)."""
SETTLED_S = 1.5
"""Past ``SHIELD_GRACE_S``: for the answers given up on to reach their clients, and for the processes of
a gateway that applied a change a moment apart."""


class Shields:
    """Per shielded cluster: when this process closed its connections there, and when it last applied a
    change that moved a binding off it (a failover's flip). Times are ``time.monotonic``."""

    def __init__(self, default_cluster: str) -> None:
        self.default_cluster = default_cluster
        """Where a key that nothing binds goes."""
        self._closed_at: dict[str, float] = {}
        self._moved_off_at: dict[str, float] = {}
        self._applied: RoutingSnapshot | None = None
        self._diffed: tuple[RoutingSnapshot | None, set[str]] = (None, set())
        """The last snapshot compared with the applied one, and the clusters bindings moved off."""

    def newly_closed(self, snapshot: RoutingSnapshot) -> set[str]:
        """The clusters ``snapshot`` shields (or marks down) that were not when last applied here."""
        return _closed(snapshot) - self._closed_at.keys()

    def apply(self, snapshot: RoutingSnapshot, now: float) -> None:
        """Take ``snapshot`` as applied at ``now``: once its shields' connections are closed."""
        closed = _closed(snapshot)
        moved = self._moved_off(snapshot)
        self._closed_at = {c: self._closed_at.get(c, now) for c in closed}
        kept = {c: at for c, at in self._moved_off_at.items() if c in closed}
        self._moved_off_at = kept | {c: now for c in moved & closed}
        self._applied, self._diffed = snapshot, (None, set())

    def settling(self, cluster: str, newest: RoutingSnapshot, now: float) -> bool:
        """Whether a write sent to ``cluster`` before it was shielded may still wait for its answer, in
        this process or another of the gateway's. Each process gives up on such writes
        ``SHIELD_GRACE_S`` after it applies the shield, and holds the writes that come after it until a
        change moves their routes; the gateway's processes apply that change within moments of each
        other, as every one acknowledged the shield before it was made. So the clock runs from the later
        of this process's shield and its move off the cluster: a process frozen through the shield
        applies it seconds after the others, and still holds a client's writes when they have long
        counted their own shield out (a chaos trial: a process SIGSTOPped 5.4 s across a failover's
        shield; the other took a later batch of a Java producer's as the start on the new cluster, and
        the held ones were refused until its delivery time-out). Sessions route by the ``newest``
        snapshot at once, while applying it may wait behind an older epoch's requests: a shield or a
        move in it not applied here yet is settling too. A process that starts with the cluster
        shielded counts from its start, though it sent nothing there."""
        closed = self._closed_at.get(cluster)
        if closed is None:
            return newest.shielded(cluster)
        if newest is not self._applied and cluster in self._moved_off(newest):
            return True
        since = max(closed, self._moved_off_at.get(cluster, closed))
        return now - since < SHIELD_GRACE_S + SETTLED_S

    def fresh(self, cluster: str, now: float) -> bool:
        """Whether ``cluster`` was shielded (or marked down) less than ``SHIELD_HOLDS_S`` ago in this
        process: its clients' writes are held for a routing change meanwhile (a failover's flip comes
        after its shield), answered at once after that (a dead cluster costs the others nothing)."""
        closed = self._closed_at.get(cluster)
        return closed is None or now - closed < SHIELD_HOLDS_S

    def _moved_off(self, snapshot: RoutingSnapshot) -> set[str]:
        """The clusters some binding moves off from the snapshot last applied here to ``snapshot``
        (none before the first); worked out once per snapshot, as writes ask for each batch."""
        if self._diffed[0] is not snapshot:
            moved = set()
            if self._applied is not None:
                before, default = self._applied, self.default_cluster
                for key in before.bindings.keys() | snapshot.bindings.keys():
                    # a key without a binding of its own follows the one that decides for it
                    old, _ = effective(key, before, default)
                    if effective(key, snapshot, default)[0] != old:
                        moved.add(old)
            self._diffed = (snapshot, moved)
        return self._diffed[1]


def _closed(snapshot: RoutingSnapshot) -> set[str]:
    return {c for c in snapshot.clusters if snapshot.shielded(c)}
