"""Saga steps that change routing: locks, the block, the flip, and waiting for every gateway to apply them.

Every write is a fenced change under the epochs the saga read, carrying a request id derived from the
saga and the step: a step retried after its answer was lost finds its change committed and writes
nothing twice.
"""

from __future__ import annotations

import contextvars
import logging
import time
import uuid

from temporalio import activity

from activities.deps import Deps
from activities.fence import stood_still
from activities.pulse import beat
from activities.recorded import request_id, step
from switchyard import kafka
from switchyard.acked import acked_ends
from switchyard.errors import AcksTimeout, BindingConflict, BindingRefused
from switchyard.keys import BindingKey
from switchyard.mirror.mapstore import end_record, store_records
from switchyard.mirror.offsets import OffsetMap
from switchyard.mirror.status import still_copying
from switchyard.model import BindingState, ClusterState, Link, LinkState
from switchyard.routing import BindingChange, ClusterChange, LinkChange
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.locks import SagaLocks
from switchyard.sagas import steps
from switchyard.sagas.steps import (
    Acked,
    AcksRequest,
    Blocked,
    BlockRequest,
    Flipped,
    FlipRequest,
    LockRequest,
    PartitionEnd,
    Unblocked,
    UnblockRequest,
)
from switchyard.threads import Worker

_ACK_POLL_S = 1.0
STOP_COPYING_S = 3.0
"""How long a failover's flip waits for the mirror to report its link's copying stopped."""
SHIELD_ACKS_S = 30.0
"""How long a failover's flip waits for every gateway to have stopped using the source it shielded,
before it reads how far clients may have read there (a gateway that has not is still waited for after
the flip)."""
SOURCE_ENDS_S = 3.0
"""How long a failover's flip asks the source for its ends: a failed cluster costs no more, clients held."""
log = logging.getLogger(__name__)


def _shield_id(attempt: int) -> str:
    """The request id of a failover's shield of its source in attempt ``attempt`` of its flip: a failed
    attempt unshields what any attempt of the saga shielded."""
    return request_id(f"shield-{attempt}")


class RoutingActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.locks = SagaLocks(deps.zk, deps.store.layout)

    @step(steps.LOCK)
    def lock_keys(self, request: LockRequest) -> None:
        for text in request.keys:
            self.locks.acquire(BindingKey.parse(text), request.saga_id, request.link, request.groups)

    @step(steps.UNLOCK)
    def unlock_keys(self, request: LockRequest) -> None:
        for text in request.keys:
            self.locks.release(BindingKey.parse(text), request.saga_id)

    @step(steps.BLOCK)
    def block_keys(self, request: BlockRequest) -> Blocked:
        """Block the keys where they are, fenced on the plan's epochs; wait until every gateway holds
        their requests. Asked again after the flip landed (a worker died before the saga heard of the
        steps it ran while clients were held), says so and changes nothing."""
        store = self.deps.store
        flipped = store.committed_epoch(request_id("flip"))
        if flipped is not None:
            return Blocked(store.committed_epoch(request_id("block")) or 0, 0, flipped=flipped)
        changes = [
            BindingChange(BindingKey.parse(k), request.epochs[k], request.source, BindingState.BLOCKED)
            for k in request.keys
        ]
        epoch = store.apply(
            changes, actor=f"saga:{request.saga_id}", reason="switch: block stale requests",
            request_id=request_id("block"),
        )  # fmt: skip
        acked = self.wait(epoch, request.acks_timeout_s)
        return Blocked(epoch, acked)

    @step(steps.UNBLOCK)
    def unblock_keys(self, request: UnblockRequest) -> Unblocked:
        """Undo the block (compensation): the keys active again where they were, or unbound again when
        they were not bound before. Nothing to do when the block never landed; ``flipped`` when the flip
        landed after all (the saga then goes forward)."""
        store = self.deps.store
        if store.committed_epoch(request_id("flip")) is not None:
            return Unblocked(0, flipped=True)
        changes = []
        for text in request.keys:
            key = BindingKey.parse(text)
            bound = store.binding(key)
            if bound is None or bound.state is BindingState.ACTIVE:
                continue  # never blocked
            moved = request.block_epoch and bound.epoch != request.block_epoch
            if bound.cluster != request.source or moved:
                raise BindingConflict(
                    text, request.block_epoch, bound.epoch, f" ({bound.state} on {bound.cluster})"
                )
            state = BindingState.UNBOUND if text in request.unbind else BindingState.ACTIVE
            changes.append(BindingChange(key, bound.epoch, request.source, state))
        if not changes:
            return Unblocked(0)
        epoch = store.apply(
            changes, actor=f"saga:{request.saga_id}", reason="switch abandoned: unblock",
            request_id=request_id("unblock"),
        )  # fmt: skip
        self.wait(epoch, request.acks_timeout_s)
        return Unblocked(epoch)

    @step(steps.FLIP)
    def flip_keys(self, request: FlipRequest) -> Flipped:
        """Store where the copy stands, closing the fence's window when asked (the source's ends must be
        those the copy was drained to), then in one fenced change: the keys active on the target, the link
        promoted (the gateway refuses clients' writes to an unpromoted target, so none sees one without
        the other). A failover shields the source first, and waits for the gateways to stop using it:
        its final positions then say how far clients may have read there (see ``_resumes``)."""
        store, deps = self.deps.store, self.deps
        flip_id = request_id("flip")
        link = deps.link(request.link)
        if link.state is LinkState.PROMOTED:
            done = store.committed_epoch(flip_id)  # its ledger row may be pending: the worker died
            if done is not None:  # this step's own change, retried after its answer was lost
                return self._flipped_before(done, request)
            raise BindingRefused(f"link {link.id} was promoted by someone else")
        paused = False
        try:
            if self._failover(request):
                if link.state is LinkState.RUNNING:
                    self._pause(request)
                    paused = True
                link = self._stop_copying(request)
                self._shield(request)
            return self._flip(request, link, flip_id)
        except BaseException:
            if paused:  # the saga goes on, or is abandoned, with the link copying as before
                self._resume_copying(request)
            if self._failover(request):
                self._unshield(request)
            raise

    @staticmethod
    def _failover(request: FlipRequest) -> bool:
        """A failover's flip: nothing drained, the copy stopped where it stands (see ``_stop_copying``)."""
        return request.shield_source and not request.ends

    def _flip(self, request: FlipRequest, link: Link, flip_id: str) -> Flipped:
        store = self.deps.store
        final, target_ends = self._store_final(request)
        bindings = [
            BindingChange(BindingKey.parse(k), request.epochs[k], request.target, BindingState.ACTIVE)
            for k in request.keys
        ]
        clusters = []
        if request.shield_source:
            source = store.cluster(request.source)
            if source is not None and source.state is ClusterState.ACTIVE:
                shielded = ClusterChange(source.id, source.epoch, source.bootstrap, ClusterState.SHIELDED)
                clusters.append(shielded)
        epoch = store.apply(
            [*clusters, *bindings, LinkChange.of(link, LinkState.PROMOTED)], actor=f"saga:{request.saga_id}",
            reason=f"switch to {request.target}", request_id=flip_id,
        )  # fmt: skip
        return Flipped(epoch, final, sum(target_ends))

    def _pause(self, request: FlipRequest) -> None:
        """The link paused (fenced, in the ledger), under a request id of its own: an earlier attempt's
        pause, undone by its resume when it failed, is done again."""
        self.deps.store.apply(
            [LinkChange.of(self.deps.link(request.link), LinkState.PAUSED)], actor=f"saga:{request.saga_id}",
            reason="failover: the copy stopped to read where it stands",
            request_id=request_id(f"pause-{uuid.uuid4().hex[:12]}"),
        )  # fmt: skip

    def _stop_copying(self, request: FlipRequest) -> Link:
        """The paused link, once the mirror reports it has stopped copying (its writes landed), within
        ``STOP_COPYING_S``: a failover's mirror copying on until it saw the promotion wrote records past
        the final position read, the lost window counted them, and one written after the clients' first
        write on the target would be presented as theirs. A mirror member cut off from the source (its
        link error set) copies nothing, and one that does not report in time is down."""
        store = self.deps.store
        deadline = time.monotonic() + STOP_COPYING_S
        while time.monotonic() < deadline:
            if not still_copying(store.zk, store.layout, request.link, cut_off=False):
                break
            beat(f"waiting for the mirror to stop copying link {request.link}")
            time.sleep(0.1)
        return self.deps.link(request.link)

    def _shield(self, request: FlipRequest) -> None:
        """The source shielded ahead of the flip, once every gateway has let go of it (``SHIELD_ACKS_S``
        at most): no client reads or writes there after, so its ends are past all they saw. Shielded
        already (by an earlier attempt, or anyone), it is waited for the same."""
        store = self.deps.store
        source = store.cluster(request.source)
        if source is None:
            return
        epoch = source.epoch
        if source.state is ClusterState.ACTIVE:
            change = ClusterChange(source.id, source.epoch, source.bootstrap, ClusterState.SHIELDED)
            epoch = store.apply(
                [change], actor=f"saga:{request.saga_id}", reason="failover: shielded before the flip",
                request_id=_shield_id(activity.info().attempt),
            )  # fmt: skip
        try:
            self.wait(epoch, SHIELD_ACKS_S)
        except AcksTimeout as exc:
            log.warning(
                "failover of link %s: flipping with gateways still on the source: %s", request.link, exc
            )

    def _unshield(self, request: FlipRequest) -> None:
        """The source used again where this saga's flip did not land and the source is as an attempt of
        it shielded it (its epoch since unchanged: a shield of someone else's, or one changed since, is
        left alone), but for the origin of a fault migration whose end is not recorded (as
        ``RoutingStore.set_cluster_state``). Best effort, as ``_resume_copying``."""
        store = self.deps.store
        try:
            source = store.cluster(request.source)
            if source is None or source.state is not ClusterState.SHIELDED:
                return
            if store.committed_epoch(request_id("flip")) is not None:
                return
            ours = {store.committed_epoch(_shield_id(n)) for n in range(1, activity.info().attempt + 1)}
            if source.epoch not in ours or store.unrecorded_fault_migrations(source.id):
                return
            store.apply(
                [ClusterChange(source.id, source.epoch, source.bootstrap, ClusterState.ACTIVE)],
                actor=f"saga:{request.saga_id}", reason="failover: its flip failed, the source unshielded",
                request_id=request_id(f"unshield-{uuid.uuid4().hex[:12]}"),
            )  # fmt: skip
        except Exception:
            log.warning(
                "failover of link %s: source left shielded by a failed flip", request.link, exc_info=True
            )

    def _resume_copying(self, request: FlipRequest) -> None:
        """The link this attempt paused running again, where it still is paused (best effort: the error
        that stopped the flip is the one the saga hears of)."""
        try:
            link = self.deps.link(request.link)
            if link.state is LinkState.PAUSED:
                self.deps.store.apply(
                    [LinkChange.of(link, LinkState.RUNNING)], actor=f"saga:{request.saga_id}",
                    reason="failover: its flip failed, the copy goes on",
                    request_id=request_id(f"resume-{uuid.uuid4().hex[:12]}"),
                )  # fmt: skip
        except Exception:
            log.warning("link %s: left paused by a failed flip: resume it", request.link, exc_info=True)

    def _flipped_before(self, epoch: int, request: FlipRequest) -> Flipped:
        """The flip as an earlier attempt stored it: the final positions it wrote next to the offset map
        (the target has taken clients' writes since)."""
        stored = self.deps.link_records(request.target, request.link).ends
        if not stored:  # a link that copied no partition
            return Flipped(epoch, self._final(request)[0])
        final = [PartitionEnd(t, p, source) for (t, p), (source, _) in sorted(stored.items())]
        return Flipped(epoch, final, sum(target for _, target in stored.values()))

    @step(steps.AWAIT_ACKS)
    def await_acks(self, request: AcksRequest) -> Acked:
        return Acked(request.epoch, self.wait(request.epoch, request.timeout_s))

    def _store_final(self, request: FlipRequest) -> tuple[list[PartitionEnd], list[int]]:
        """Each partition's final position next to the offset map: how far the source was copied, and
        the target's end then — where the lost window and the reverse link start. The fence, when asked,
        reads the source's ends beside the target's (clients are held), and is judged before anything
        is written: the window opened with the ends the drain read, and nothing may have moved them."""
        final, read = self._final(request)
        fence = None
        if request.fence:
            fenced = {(e.topic, e.partition): e.end for e in request.ends}
            run = contextvars.copy_context().run  # the activity's, for what the read reports
            fence = Worker(run, stood_still, self.deps, request.source, fenced, name="fence")
            fence.start()
        target_ends = read if read is not None else self._target_ends(request, final)
        if fence is not None:
            fence.join()  # FenceBroken raised here: nothing written
        resumes = self._resumes(request, final) if self._failover(request) else {}
        target = self.deps.bootstrap(request.target)
        records = [
            end_record(request.link, p.topic, p.partition, p.end, end, resumes.get((p.topic, p.partition)))
            for p, end in zip(final, target_ends, strict=True)
        ]
        store_records(
            target, records, f"final positions of link {request.link}", self.deps.map_producer(request.target)
        )
        return final, target_ends

    def _final(self, request: FlipRequest) -> tuple[list[PartitionEnd], list[int] | None]:
        """How far the source was copied: the drained ends (planned), or what the target holds (failover;
        with the target's ends it was read from). A failover's mirror may still be copying: the target's
        end stored beside the copied position must be the one that position was read from, or a record
        copied in between would be a hole in the offsets clients see and the next one written there be
        presented at its offset (a chaos trial's committing group skipped a record so)."""
        if request.ends:
            return request.ends, None
        target = self.deps.bootstrap(request.target)
        maps = self.deps.link_records(request.target, request.link).maps
        copied = kafka.partitions(target, self.deps.link(request.link).copies)
        ends = sorted(self.deps.ends(request.target, copied).items())
        final = [PartitionEnd(t, p, maps.get((t, p), OffsetMap()).next_source(end)) for (t, p), end in ends]
        return final, [end for _, end in ends]

    def _resumes(self, request: FlipRequest, final: list[PartitionEnd]) -> dict[tuple[str, int], int]:
        """Per partition of a failover, past every record clients may have read on the source: where the
        target's records written since are presented (see :mod:`switchyard.mirror.presented`). Its high
        watermarks, read once no gateway uses it, where it answers; and the ends of the writes the
        gateways saw it acknowledge (published before each acknowledged epoch), where it does not — or
        took them past its high watermark (acks=1)."""
        keys = [(p.topic, p.partition) for p in final]
        ends: dict[tuple[str, int], int] = {}
        try:
            with self.deps.admins.asking(request.source) as admin:
                ends = kafka.listed_ends(admin, keys, timeout_s=SOURCE_ENDS_S)
        except Exception as exc:
            log.info(
                "failover of link %s: the source's ends not read (%r): the gateways' say", request.link, exc
            )
        acked = acked_ends(self.deps.store.zk, self.deps.store.layout, request.source)
        return {key: max(ends.get(key, 0), acked.get(key, 0)) for key in keys}

    def _target_ends(self, request: FlipRequest, final: list[PartitionEnd]) -> list[int]:
        ends = self.deps.ends(request.target, [(p.topic, p.partition) for p in final])
        return [ends[(p.topic, p.partition)] for p in final]

    def wait(self, epoch: int, timeout_s: float) -> int:
        """Wait until every registered gateway applied ``epoch``, heartbeating; how many there are."""
        deadline = time.monotonic() + timeout_s
        while True:
            beat(f"waiting for the gateways to apply epoch {epoch}")
            try:
                wait = max(0.01, min(_ACK_POLL_S, deadline - time.monotonic()))
                return len(wait_for_acks(self.deps.zk, self.deps.store.layout, epoch, timeout_s=wait))
            except AcksTimeout as exc:
                if time.monotonic() >= deadline:
                    raise AcksTimeout(epoch, exc.laggards, timeout_s) from None
