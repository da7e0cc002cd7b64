"""The routing state in ZooKeeper: clusters, bindings and mirror links, changed only by fenced CAS.

A change names, for every key it touches, the epoch the caller read (0: the key must be unbound). One
ZooKeeper transaction then checks every node's version, advances the global epoch counter, writes the
nodes with the new epoch and creates the change's outcome marker ``txns/<id>``. Either all of it
happens or none; a key that moved raises :class:`BindingConflict` naming it and both epochs.

The ledger and ZooKeeper agree through the marker:

1. the change is written to the ledger as *pending*; if that fails, ZooKeeper is never touched;
2. the ZooKeeper transaction runs; if it fails, the pending rows are removed;
3. the ledger row is marked committed.

If the process dies or loses ZooKeeper between 1 and 3, the outcome is settled later by whoever
recovers the pending row: it tries to create the marker as ``aborted``. If the create succeeds the
change never happened (and now never can, as its own transaction would fail on the marker) and the rows
are removed; if the marker already says ``committed`` the row is marked committed. So a failed
ZooKeeper write leaves no ledger row, and a failed ledger write leaves no ZooKeeper change.

Error handling: ZooKeeper problems raise :class:`RoutingUnavailable`; SQL problems raise
:class:`LedgerError`; fencing failures raise :class:`BindingConflict`; refused changes raise
:class:`BindingRefused`.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.states import ZnodeStat

from switchyard.errors import BindingConflict, BindingRefused, LedgerError, RoutingError, RoutingUnavailable
from switchyard.keys import BindingKey
from switchyard.ledger import Ledger, RoutingTxn
from switchyard.ledger.kinds import (
    BINDINGS,
    CLUSTERS,
    KINDS,
    LINKS,
    MIGRATIONS,
    AnyChange,
    AnyKind,
    BindingChange,
    ClusterChange,
    LinkChange,
    kind_of,
)
from switchyard.model import (
    Binding,
    BindingState,
    Cluster,
    ClusterState,
    Link,
    LinkState,
    PartitionId,
    PartitionMigration,
    now,
)
from switchyard.routing.layout import Layout, ensure_layout, epoch_data, remember_changes
from switchyard.routing.snapshot import RoutingSnapshot, read_snapshot

log = logging.getLogger(__name__)

COMMITTED, ABORTED = b"committed", b"aborted"
_ATTEMPTS = 20


@dataclass
class _Node:
    path: str
    stat: ZnodeStat | None
    """None when the node does not exist."""
    epoch: int = 0
    current: Any = None
    """The node of its kind that is there, if any."""
    new_data: bytes = b""
    parents: list[str] = field(default_factory=list)


class RoutingStore:
    """Reads and fenced writes of the routing tree; one instance per ZooKeeper client."""

    def __init__(
        self, zk: KazooClient, root: str, ledger: Ledger, *, settle_after: timedelta = timedelta(seconds=30)
    ) -> None:
        self.zk = zk
        self.layout = Layout(root)
        self.ledger = ledger
        self.settle_after = settle_after
        """Pending ledger rows younger than this may belong to a writer still at work: left alone."""

    def ensure_layout(self) -> None:
        ensure_layout(self.zk, self.layout)

    # ---- reads

    def snapshot(self) -> RoutingSnapshot:
        """Every cluster and binding as of one epoch (no change committed while it was read)."""
        return read_snapshot(self.zk, self.layout)

    def epoch(self) -> int:
        data, _ = self._get(self.layout.epoch)
        return int(json.loads(data)["epoch"])

    def binding(self, key: BindingKey) -> Binding | None:
        current: Binding | None = self._read(BINDINGS, key).current
        return current

    def cluster(self, cluster_id: str) -> Cluster | None:
        current: Cluster | None = self._read(CLUSTERS, cluster_id).current
        return current

    # ---- writes

    def apply(
        self,
        changes: Sequence[AnyChange],
        *,
        actor: str,
        reason: str,
        request_id: str | None = None,
        force: bool = False,
    ) -> int:
        """Make the changes (of any kinds) atomically under one new epoch and return that epoch.

        ``request_id`` makes the call idempotent: when a change under that id has already been
        committed, its epoch is returned and nothing is written again (an activity retried after its
        answer was lost). ``force`` allows moving a binding onto a shielded or down cluster.
        """
        if not changes:
            raise BindingRefused("nothing to change")
        _no_duplicates(changes)
        _well_formed(changes)
        self.recover()
        if request_id is not None:
            done = self.committed_epoch(request_id)
            if done is not None:
                return done
        for _ in range(_ATTEMPTS):
            counter, counter_stat = self._get(self.layout.epoch)
            epoch = int(json.loads(counter)["epoch"]) + 1
            nodes, txn = self._prepare(
                changes, epoch=epoch, actor=actor, reason=reason, request_id=request_id, force=force
            )
            self.ledger.record_intent(txn)
            changed = [[c.kind.name, c.kind.segment(c.subject)] for c in changes]
            recent = remember_changes(counter, epoch, txn.id, changed)
            outcome = self._commit(txn, nodes, counter_stat.version, recent)
            if outcome == "committed":
                self._finish(txn)
                log.info("epoch %d: %s by %s (%s)", epoch, _describe(txn), actor, reason)
                return epoch
            self.ledger.discard(txn.id)
            if outcome == "node moved":
                self._check_fences(changes)
            # another change took the epoch first: read again and retry under the next one
        raise RoutingUnavailable(f"gave up after {_ATTEMPTS} attempts: the epoch counter kept moving")

    def set_binding(
        self,
        key: BindingKey,
        cluster: str,
        state: BindingState = BindingState.ACTIVE,
        *,
        actor: str,
        reason: str,
        expected_epoch: int | None = None,
        force: bool = False,
    ) -> int:
        """Bind one key; without ``expected_epoch`` it fences on the epoch it reads now."""
        if expected_epoch is None:
            current = self.binding(key)
            expected_epoch = current.epoch if current else 0
        change = BindingChange(key, expected_epoch, cluster, state)
        return self.apply([change], actor=actor, reason=reason, force=force)

    def register_cluster(self, cluster_id: str, bootstrap: str, *, actor: str, reason: str) -> int:
        existing = self.cluster(cluster_id)
        if existing is not None:
            raise BindingRefused(
                f"cluster {cluster_id!r} is already registered ({existing.bootstrap}, {existing.state})"
            )
        return self.apply([ClusterChange(cluster_id, 0, bootstrap)], actor=actor, reason=reason)

    def set_cluster_state(
        self, cluster_id: str, state: ClusterState, *, actor: str, reason: str, force: bool = False
    ) -> int:
        """Shield, unshield or mark down a cluster (a routing change like any other).

        A fault migration's origin is not unshielded (unless ``force``) before its true end is recorded:
        the gateways would read it up to the chosen end offset, and a write around them could add records
        some readers read and others passed."""
        existing = self.cluster(cluster_id)
        if existing is None:
            raise BindingRefused(f"cluster {cluster_id!r} is not registered (switchyard clusters add)")
        if existing.state is state:
            raise BindingRefused(f"cluster {cluster_id!r} is already {state}")
        if state is ClusterState.ACTIVE and not force:
            unknown = self.unrecorded_fault_migrations(cluster_id)
            if unknown:
                raise BindingRefused(
                    f"{cluster_id} is the origin of fault migrations whose end is not recorded: "
                    f"{', '.join(unknown)}. Run `switchyard migrations check` (it records them once the "
                    "cluster answers), or --force"
                )
        change = ClusterChange(cluster_id, existing.epoch, existing.bootstrap, state)
        return self.apply([change], actor=actor, reason=reason)

    def unrecorded_fault_migrations(self, cluster_id: str) -> list[str]:
        """The fault migrations from ``cluster_id`` in effect whose true end is not recorded: it stays
        shielded until it is (see :meth:`set_cluster_state`)."""
        return sorted(
            str(m.id)
            for m in self.snapshot().migrations.values()
            if m.origin == cluster_id and m.in_effect and m.origin_end is None
        )

    def link(self, link_id: str) -> Link | None:
        current: Link | None = self._read(LINKS, link_id).current
        return current

    def migration(self, partition: PartitionId) -> PartitionMigration | None:
        current: PartitionMigration | None = self._read(MIGRATIONS, partition).current
        return current

    def create_link(
        self,
        link_id: str,
        source: str,
        target: str,
        *,
        include: Sequence[str] = (".*",),
        exclude: Sequence[str] = (),
        reverse_of: str | None = None,
        actor: str,
        reason: str,
    ) -> int:
        change = LinkChange(link_id, 0, source, target, tuple(include), tuple(exclude), reverse_of=reverse_of)
        return self.apply([change], actor=actor, reason=reason)

    def set_link_state(self, link_id: str, state: LinkState, *, actor: str, reason: str) -> int:
        """Pause, resume or promote a link (fenced on the epoch read now)."""
        existing = self.link(link_id)
        if existing is None:
            raise BindingRefused(f"link {link_id!r} does not exist")
        return self.apply([LinkChange.of(existing, state)], actor=actor, reason=reason)

    def recover(self, *, everything: bool = False) -> list[tuple[str, str]]:
        """Settle pending ledger rows older than ``settle_after`` (all with ``everything``)."""
        settled = []
        cutoff = now() - (timedelta(0) if everything else self.settle_after)
        for pending in self.ledger.pending():
            if pending.created_at > cutoff:
                continue
            if self._settle(pending.id):
                self.ledger.mark_committed(pending.id, at=now())
                self._drop_marker(pending.id)
                settled.append((pending.id, "committed"))
            else:
                self.ledger.discard(pending.id)
                settled.append((pending.id, "aborted"))
            log.warning("settled pending routing change %s: %s", pending.id, settled[-1][1])
        return settled

    # ---- internals

    def _prepare(
        self,
        changes: Sequence[AnyChange],
        *,
        epoch: int,
        actor: str,
        reason: str,
        request_id: str | None,
        force: bool,
    ) -> tuple[list[_Node], RoutingTxn]:
        at = now()
        nodes: list[_Node] = []
        events = []
        for change in sorted(changes, key=lambda c: KINDS.index(c.kind)):
            kind = change.kind
            node = self._read(kind, change.subject)
            _fence(kind.label(change.subject), change.expected_epoch, node)
            change.check(node.current, self, changes, force)
            event = change.event(node.current, epoch, actor, reason, at)
            written = kind.left_by(event)
            node.new_data = b"" if written is None else written.to_json()  # empty: none (may hold others)
            nodes.append(node)
            events.append(event)
        return nodes, RoutingTxn(str(uuid.uuid4()), epoch, actor, reason, at, tuple(events), request_id)

    def _commit(
        self, txn: RoutingTxn, nodes: list[_Node], epoch_version: int, recent: list[list[Any]]
    ) -> str:
        """Run the ZooKeeper transaction: 'committed', 'node moved' or 'epoch moved'."""
        try:
            for node in nodes:
                for parent in node.parents:
                    self.zk.ensure_path(parent)
            t = self.zk.transaction()
            t.set_data(self.layout.epoch, epoch_data(txn.epoch, txn.id, txn.at, recent), epoch_version)
            for node in nodes:
                if node.stat is None:
                    t.create(node.path, node.new_data)
                else:
                    t.set_data(node.path, node.new_data, node.stat.version)
            t.create(self.layout.txn(txn.id), COMMITTED)
            results = t.commit()
        except KazooException as exc:
            return self._settle_after_loss(txn, exc)
        failure = first_failure(results)
        if failure is None:
            return "committed"
        op = results.index(failure)
        if op == 0:  # the counter moved: another change took this epoch
            return "epoch moved"
        if op == len(results) - 1 and isinstance(failure, NodeExistsError):
            raise RoutingError(f"change {txn.id} was settled as aborted by a recovery while in flight")
        if isinstance(failure, BadVersionError | NodeExistsError | NoNodeError):
            return "node moved"
        raise RoutingError(f"ZooKeeper refused the change: {failure!r}")

    def _settle_after_loss(self, txn: RoutingTxn, exc: Exception) -> str:
        try:
            committed = self._settle(txn.id)
        except RoutingUnavailable:
            raise RoutingUnavailable(
                f"ZooKeeper was lost while change {txn.id} (epoch {txn.epoch}) was in flight ({exc!r}); "
                "its outcome is unknown and is settled by the next change or `switchyard bindings recover`"
            ) from exc
        return "committed" if committed else "epoch moved"

    def _settle(self, txn_id: str) -> bool:
        """Decide a change's outcome once and for all; True when it reached ZooKeeper."""
        marker = self.layout.txn(txn_id)
        try:
            self.zk.retry(self.zk.create, marker, ABORTED)
            return False
        except NodeExistsError:
            data, _ = self._get(marker)
            return data == COMMITTED
        except KazooException as exc:
            raise RoutingUnavailable(f"ZooKeeper: cannot settle change {txn_id}: {exc!r}") from exc

    def _finish(self, txn: RoutingTxn) -> None:
        try:
            self.ledger.mark_committed(txn.id, at=now())
        except LedgerError:
            log.exception("epoch %d is in ZooKeeper, its ledger row stays pending until recovered", txn.epoch)
            raise
        self._drop_marker(txn.id)

    def _drop_marker(self, txn_id: str) -> None:
        try:
            self.zk.delete(self.layout.txn(txn_id))
        except NoNodeError:
            pass
        except KazooException:
            log.warning("could not delete the marker of change %s; it is harmless", txn_id)

    def committed_epoch(self, request_id: str) -> int | None:
        """The epoch of the committed attempt of ``request_id``, settling any attempt left pending (its
        writer died between ZooKeeper and the ledger): decided once and for all, so a writer still in
        flight can no longer land it."""
        for attempt in self.ledger.requested(request_id):
            if attempt.status == "pending":
                if self._settle(attempt.id):
                    self.ledger.mark_committed(attempt.id, at=now())
                    self._drop_marker(attempt.id)
                    return attempt.epoch
                self.ledger.discard(attempt.id)
            else:
                return attempt.epoch
        return None

    def _check_fences(self, changes: Sequence[AnyChange]) -> None:
        """Raise BindingConflict for the first subject that moved; return when none did (retry then)."""
        for change in changes:
            kind = change.kind
            _fence(kind.label(change.subject), change.expected_epoch, self._read(kind, change.subject))

    def _read(self, kind: AnyKind, subject: Any) -> _Node:
        folder, path = self.layout.folder(kind.name), self.layout.node(kind, subject)
        try:
            data, stat = self.zk.retry(self.zk.get, path)
        except NoNodeError:
            parent = path.rsplit("/", 1)[0]
            return _Node(path, None, parents=[] if parent == folder else [parent])
        except KazooException as exc:
            raise RoutingUnavailable(f"ZooKeeper: cannot read {path}: {exc!r}") from exc
        if not data:
            return _Node(path, stat)
        current = kind.decode(subject, data)
        return _Node(path, stat, current.epoch, current)

    def _get(self, path: str) -> tuple[bytes, ZnodeStat]:
        try:
            data, stat = self.zk.retry(self.zk.get, path)
        except NoNodeError as exc:
            raise RoutingError(f"ZooKeeper: {path} is missing (is the layout created?)") from exc
        except KazooException as exc:
            raise RoutingUnavailable(f"ZooKeeper: cannot read {path}: {exc!r}") from exc
        return data, stat


def first_failure(results: list[object]) -> Exception | None:
    """The operation that failed a ZooKeeper multi; the others only report being rolled back."""
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, RolledBackError | RuntimeInconsistency):
            return result
    return None


def _fence(name: str, expected: int, node: _Node) -> None:
    if node.epoch != expected:
        current = node.current
        detail = f" (changed by {current.by} at {current.updated_at.isoformat()})" if current else ""
        raise BindingConflict(name, expected, node.epoch, detail)


def _no_duplicates(changes: Sequence[AnyChange]) -> None:
    names = [c.kind.label(c.subject) for c in changes]
    seen = {n for n in names if names.count(n) > 1}
    if seen:
        raise BindingRefused(f"a change names {', '.join(sorted(seen))} more than once")


def _well_formed(changes: Sequence[AnyChange]) -> None:
    """Names without invisible characters or edge spaces, patterns that compile: checked where they
    enter, so nothing that reads the tree later meets them."""
    try:
        for change in changes:
            change.well_formed()
    except ValueError as exc:
        raise BindingRefused(str(exc)) from None


def _describe(txn: RoutingTxn) -> str:
    return ", ".join(kind_of(e).describe(e) for e in txn.events)
