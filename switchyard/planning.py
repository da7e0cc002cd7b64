"""The plan of a switch: what moves, from where to where, along which link — or why it must not.

A saga's first step, and what ``--dry-run`` prints. Planning reads and changes nothing: the epochs it
reads are what every later write of the saga is fenced on, so a change made by someone else in between
makes the saga's first write fail rather than undo it.

A key that is not bound yet moves from wherever its traffic goes today (the binding that decides for it
now, or the default cluster) and is bound at the flip with fence epoch 0.

A switchback returns keys a switch moved, so it needs one to return from: its link must reverse a
promoted link (the switch it undoes), the keys must have been on their cluster since that promotion, and
the link must lead back rather than out again. Switches along a chain of reverse links alternate: the
first link of the chain (one that reverses nothing) went out, its reverse came back, the reverse of that
went out again, and so on. Anything else is a switchover, which can make the same move.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaException

from switchyard import kafka
from switchyard.config import Config
from switchyard.errors import KafkaOperationError, RoutingError
from switchyard.identity import Identity
from switchyard.keys import BindingKey, KeyKind
from switchyard.mirror.status import read_status
from switchyard.model import BindingState, ClusterState, Link, LinkState
from switchyard.resolution import Resolution, resolve
from switchyard.routing.gateways import registered
from switchyard.routing.locks import SagaLocks
from switchyard.routing.snapshot import RoutingSnapshot
from switchyard.routing.store import RoutingStore
from switchyard.sagas.requests import Kind
from switchyard.sagas.steps import LinkSplit, Partition, Plan, PlanRequest
from switchyard.sharing import Unshareable, divide, split_id, unknown_keys
from switchyard.usage import Use, groups_of, read_usage, uses_of

MIRROR_WAIT_S = 30.0
"""How long a plan waits for a mirror process to report every partition of the link: one started again
(after a crash, or as the link was just made) reports them once its copy group has handed them out —
seconds — and nothing is held meanwhile."""


def plan_switch(
    store: RoutingStore, config: Config, request: PlanRequest, *, mirror_wait_s: float = MIRROR_WAIT_S
) -> Plan:
    """The plan for ``request``; ``refusal`` says why not, and nothing else in it is then to be used.
    ``mirror_wait_s``: how long to wait for a mirror to report the link's partitions (0: as they are)."""
    plan = Plan(keys=[])
    try:
        _plan(store, config, request, plan, mirror_wait_s)
    except Refused as refused:
        plan.refusal = str(refused)
    return plan


_MIRROR_POLL_S = 0.5


class Refused(Exception):
    """Why a saga must not start; the plan carries it instead of failing."""


def _plan(
    store: RoutingStore, config: Config, request: PlanRequest, plan: Plan, mirror_wait_s: float
) -> None:
    keys = _keys(request.keys)
    plan.keys = [str(k) for k in keys]
    snapshot = store.snapshot()
    sources = {}
    for key in keys:
        bound = snapshot.bindings.get(key)
        plan.epochs[str(key)] = bound.epoch if bound else 0
        cluster, state = effective(key, snapshot, config.default_cluster)
        if state is BindingState.BLOCKED:
            raise Refused(
                f"{key} is blocked (epoch {bound.epoch if bound else '?'}): another saga is switching it, or "
                "one was interrupted (switchyard sagas list; switchyard bindings show)"
            )
        sources[str(key)] = cluster
    source = request.source or next(iter(sources.values()))
    elsewhere = {k: c for k, c in sources.items() if c != source}
    if elsewhere:
        where = ", ".join(f"{k} on {c}" for k, c in sorted(elsewhere.items()))
        raise Refused(f"the keys are not all on {source}: {where}; switch them separately")
    plan.source = source
    plan.checks.append(f"{len(keys)} keys, all routed to {source} now, none blocked")
    back = request.kind == Kind.SWITCHBACK
    if back:
        _bound(snapshot, keys, config.default_cluster)

    window_s = config.gateway.usage_window_s
    uses = read_usage(store.zk, store.layout, within_s=window_s)
    flag = "--unknown-keys" if request.unplanned else "--force"
    plan.checks.append(_known(keys, snapshot, uses, window_s, forced=request.unknown_keys, flag=flag))
    topics = {use.topic for use in uses_of(uses, keys) if use.topic}  # a group's use names no topic
    topics |= {key.name for key in keys if key.kind is KeyKind.TOPIC and key.name}
    link = _link(snapshot, source, request.target, request.link, topics, unplanned=request.unplanned)
    plan.link, plan.target = link.id, link.target
    plan.checks.append(f"link {link.id} ({link.source} -> {link.target}) is {link.state}")
    if back:
        plan.checks.append(_returns(store, snapshot, config, keys, link))
    target = snapshot.clusters.get(link.target)
    if target is None or target.state is not ClusterState.ACTIVE:
        why = target.state if target else "not registered"
        raise Refused(f"the target cluster {link.target} is {why}: it takes no new traffic")
    plan.checks.append(f"target cluster {link.target} is active")

    plan.partitions = _partitions(config, link, unplanned=request.unplanned)
    plan.checks.append(f"the link copies {len(plan.partitions)} partitions")
    if not request.unplanned:  # a failover moves whatever the link carries: its source is gone
        _divide(plan, keys, link, uses, snapshot=snapshot, config=config)
    _no_migrated_partition(snapshot, link, plan.partitions)
    if not request.unplanned:
        _mirror_follows(store, link, plan.partitions, mirror_wait_s)
        plan.checks.append("a live mirror process reports every partition, none failed")
    _unlocked(store, keys, request.saga_id)
    plan.checks.append("no other saga holds a lock on these keys")
    plan.groups = sorted(groups_of(uses, keys))
    plan.checks.append(
        f"consumer groups of these keys, as the gateways saw them: {', '.join(plan.groups)}"
        if plan.groups
        else "the gateways saw no consumer group of these keys: every idle group's offsets are carried"
    )
    gateways = registered(store.zk, store.layout)
    plan.checks.append(
        f"{len(gateways)} gateways registered (each must acknowledge the block and the flip)"
        if gateways
        else "no gateway registered: nothing to wait for (clients going direct are not moved)"
    )


def _no_migrated_partition(snapshot: RoutingSnapshot, link: Link, partitions: list[Partition]) -> None:
    """Refuse a switch along a link that copies a partition a migration moved away from or onto either of
    its clusters: the copy on the target stops where the partition's writes left, and the switched
    clients would read it instead of the partition's records (docs/partition-migration.md)."""
    copied = {(p.topic, p.partition) for p in partitions}
    for partition, migration in sorted(snapshot.migrations.items()):
        ends = {migration.origin, migration.target} & {link.source, link.target}
        if ends and (partition.topic, partition.partition) in copied:
            raise Refused(
                f"{partition} was migrated from {migration.origin} to {migration.target} (epoch "
                f"{migration.epoch}) and link {link.id} copies it: a switch would mix the partition's "
                "records with a copy that stopped at its end offset (switch topics without migrated "
                "partitions, or migrate the rest of the topic instead)"
            )


def _known(
    keys: list[BindingKey],
    snapshot: RoutingSnapshot,
    uses: list[Use],
    window_s: float,
    *,
    forced: bool,
    flag: str,
) -> str:
    """Refused when a key is named by no binding and used by no client a gateway saw: a typo, most
    likely, and a switch of it would still promote a link under everyone else's feet."""
    unknown = [str(k) for k in unknown_keys(keys, snapshot, uses)]
    if not unknown:
        return f"every key is bound, or a gateway saw its clients within {window_s:g}s"
    named = ", ".join(unknown)
    if forced:
        return f"forced: {named} unknown (no binding, no client seen within {window_s:g}s)"
    still = " — refused still where another application writes one" if flag == "--force" else ""
    raise Refused(
        f"{named}: no binding names {_them(unknown)} and no gateway saw "
        f"{'their' if len(unknown) > 1 else 'its'} clients within {window_s:g}s (gateway.usage_window_s; "
        f"switchyard usage). A typo? With {flag} the switch goes ahead: {_them(unknown)} would be bound "
        f"to the target, and every topic of the link would move with {_them(unknown)} (nothing says which "
        f"are {'theirs' if len(unknown) > 1 else 'its'}){still}"
    )


def _divide(
    plan: Plan,
    keys: list[BindingKey],
    link: Link,
    uses: list[Use],
    *,
    snapshot: RoutingSnapshot,
    config: Config,
) -> None:
    """Promote only the keys' own topics: split the link when it carries others too; refused where a
    topic of theirs is written by someone who stays (see :mod:`switchyard.sharing`)."""
    try:
        topics = {p.topic for p in plan.partitions}
        source = config.clusters[link.source].bootstrap
        division = divide(
            keys, link, topics, snapshot=snapshot, default_cluster=config.default_cluster, uses=uses,
            held=_held_on(source),
        )  # fmt: skip
    except Unshareable as exc:
        raise Refused(str(exc)) from None
    if division.split:
        new_link = split_id(link, division.moving)
        plan.split = LinkSplit(link.id, new_link, division.moving)
        plan.link = new_link
        plan.partitions = [p for p in plan.partitions if p.topic in set(division.moving)]
        plan.checks.append(
            f"link {link.id} also copies {_listed(division.staying)} for others: it is split first, and "
            f"{_listed(division.moving)} move{'s' if len(division.moving) == 1 else ''} along a link of "
            f"their own, {new_link} ({len(plan.partitions)} partitions)"
        )
    else:
        plan.checks.append(f"link {link.id} carries no topic of an application that stays on {link.source}")
    for line in division.readers:
        plan.checks.append(f"{line} on {link.source}, and will read what the reverse link copies back")


def _held_on(bootstrap: str) -> Callable[[set[str]], set[str]]:
    """Which of some topics the cluster at ``bootstrap`` holds (all, where it cannot say: the plan's
    refusal then stands as it would without asking)."""

    def held(names: set[str]) -> set[str]:
        try:
            return {t for t, _ in kafka.partitions(bootstrap, lambda t: t in names)}
        except (KafkaException, KafkaOperationError):
            return names

    return held


def _listed(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _keys(texts: list[str]) -> list[BindingKey]:
    if not texts:
        raise Refused("no binding key given")
    keys = []
    for text in dict.fromkeys(texts):
        try:
            keys.append(BindingKey.parse(text))
        except ValueError as exc:
            raise Refused(str(exc)) from None
    return keys


def effective(key: BindingKey, snapshot: RoutingSnapshot, default: str) -> tuple[str, BindingState]:
    """Where the key's traffic goes now, and in which state: its own binding, or the one that decides
    for it while it has none."""
    deciding = _deciding(key, snapshot, default)
    return deciding.cluster, deciding.state


def _deciding(key: BindingKey, snapshot: RoutingSnapshot, default: str) -> Resolution:
    """The key's own binding, or the ones that decide for it while it has none (none: the default)."""
    bound = snapshot.bindings.get(key)
    if bound is not None:
        return Resolution(bound.cluster, bound.state, (key,), bound.epoch, f"binding {key}")
    topics = [key.name] if key.kind is KeyKind.TOPIC and key.name else []
    group = key.name if key.kind is KeyKind.GROUP else None
    instance = key.name if key.kind is KeyKind.INSTANCE else None
    return resolve(
        Identity(key.app, instance=instance), snapshot.bindings, default, topics=topics, group=group
    )


def _bound(snapshot: RoutingSnapshot, keys: list[BindingKey], default: str) -> None:
    """A switchback's keys were moved by a switch, so a binding routes each; the default cluster never
    moved anything."""
    unbound = [str(k) for k in keys if not _deciding(k, snapshot, default).keys]
    if unbound:
        raise Refused(
            f"no switch to return from: {', '.join(unbound)} never moved (no binding routes "
            f"{_them(unbound)}; the default cluster {default} does). A move elsewhere is a switchover"
        )


def _returns(
    store: RoutingStore, snapshot: RoutingSnapshot, config: Config, keys: list[BindingKey], link: Link
) -> str:
    """Refused unless a switchback along ``link`` returns ``keys`` from a switch (see the module's
    docstring); else the check passed, in words."""
    switch = f"a move to {link.target} along it is a switchover, not a switchback"
    if link.reverse_of is None:
        raise Refused(f"no switch to return from: link {link.id} reverses no link; {switch}")
    promoted = _past(store, snapshot, link.reverse_of).promoted
    if promoted is None:
        raise Refused(
            f"no switch to return from: link {link.id} reverses {link.reverse_of}, which was never "
            f"promoted; {switch}"
        )
    if _steps_from_first(store, snapshot, link) % 2 == 0:
        raise Refused(
            f"no switch to return from: {link.reverse_of} was a switch back already, so link {link.id} "
            f"leads out again; {switch}"
        )
    before = sorted(
        f"{k} (epoch {d.epoch})"
        for k in keys
        if (d := _deciding(k, snapshot, config.default_cluster)).epoch < promoted
    )
    if before:
        raise Refused(
            f"no switch to return from: {', '.join(before)} on {link.source} since before the switch along "
            f"{link.reverse_of} (epoch {promoted}), which did not move {_them(before)}; {switch}"
        )
    return f"the keys return from the switch along {link.reverse_of} (epoch {promoted})"


def _them(keys: list[str]) -> str:
    return "them" if len(keys) > 1 else "it"


@dataclass(frozen=True)
class _Past:
    """What a link was: the link it reverses, and the epoch it was promoted at (None: never)."""

    reverse_of: str | None
    promoted: int | None


def _past(store: RoutingStore, snapshot: RoutingSnapshot, link_id: str) -> _Past:
    """From ZooKeeper, or from the ledger once the link is removed (its last life: an id can be reused)."""
    live = snapshot.links.get(link_id)
    if live is not None:
        return _Past(live.reverse_of, live.epoch if live.state is LinkState.PROMOTED else None)
    life = []
    for event in store.ledger.link_history(link_id):  # newest first
        life.append(event)
        if event.from_state is None:  # created here
            break
    if not life:
        raise Refused(f"link {link_id} is in neither ZooKeeper nor the ledger: which way is back is unknown")
    promoted = next((e.epoch for e in life if e.to_state is LinkState.PROMOTED), None)
    return _Past(life[0].reverse_of, promoted)


def _steps_from_first(store: RoutingStore, snapshot: RoutingSnapshot, link: Link) -> int:
    """How many reverses ``link`` is from the first link of its chain (one that reverses nothing)."""
    steps, seen, reverse_of = 0, {link.id}, link.reverse_of
    while reverse_of is not None:
        if reverse_of in seen:
            raise Refused(f"links {', '.join(sorted(seen))} reverse each other in a loop")
        seen.add(reverse_of)
        steps += 1
        reverse_of = _past(store, snapshot, reverse_of).reverse_of
    return steps


def _link(
    snapshot: RoutingSnapshot,
    source: str,
    target: str | None,
    link_id: str | None,
    topics: set[str],
    *,
    unplanned: bool,
) -> Link:
    """The link named, else the one leaving ``source`` (toward ``target``); of several, the one that
    copies the topics the gateways saw the keys use, when only one does."""
    if link_id is not None:
        link = snapshot.links.get(link_id)
        if link is None:
            raise Refused(f"link {link_id!r} does not exist (switchyard links list)")
        candidates = [link]
    else:
        candidates = [
            k for k in snapshot.links.values()
            if k.source == source and target in (None, k.target) and k.state is not LinkState.PROMOTED
        ]  # fmt: skip
        if not candidates:
            toward = f" to {target}" if target else ""
            raise Refused(
                f"no link copies from {source}{toward}: without a copy on the target there is nothing to "
                "switch to (switchyard links create)"
            )
        carrying = [k for k in candidates if any(k.copies(topic) for topic in topics)]
        if len(candidates) > 1 and len(carrying) == 1:
            candidates = carrying
        if len(candidates) > 1:
            names = ", ".join(sorted(k.id for k in candidates))
            which = (
                f"{len(carrying)} of them copy topics the keys use" if carrying
                else "the gateways saw the keys use none of their topics"
            )  # fmt: skip
            raise Refused(f"several links leave {source} ({names}) and {which}: name one with --link")
    link = candidates[0]
    if link.source != source:
        raise Refused(f"link {link.id} copies from {link.source}, but the keys are on {source}")
    if target is not None and link.target != target:
        raise Refused(f"link {link.id} copies to {link.target}, not to {target}")
    if link.problem is not None:
        raise Refused(f"link {link.id} cannot be followed: {link.problem}")
    if link.state is LinkState.PROMOTED:
        raise Refused(
            f"link {link.id} is promoted already: its target took over (switch back along its reverse)"
        )
    if link.state is LinkState.PAUSED and not unplanned:
        raise Refused(f"link {link.id} is paused: resume it, so the copy can catch up before the switch")
    return link


def _partitions(config: Config, link: Link, *, unplanned: bool) -> list[Partition]:
    """The link's partitions, from its source (from its target when the source is gone)."""
    cluster = link.target if unplanned else link.source
    try:
        found = kafka.partitions(config.clusters[cluster].bootstrap, link.copies)
    except KafkaOperationError as exc:
        raise Refused(f"cannot list the link's topics on {cluster}: {exc}") from exc
    if not found:
        raise Refused(f"link {link.id} copies no topic: nothing to drain or promote")
    return [Partition(t, p) for t, p in found]


def _mirror_follows(store: RoutingStore, link: Link, partitions: list[Partition], wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        reported = {
            (status.topic, status.partition): status
            for member in read_status(store.zk, store.layout, link.id)
            for status in member.partitions
        }
        missing = [str(p) for p in partitions if (p.topic, p.partition) not in reported]
        if not missing or time.monotonic() >= deadline:
            break
        time.sleep(_MIRROR_POLL_S)
    if missing:
        raise Refused(
            f"no mirror process reports {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} of link "
            f"{link.id}: is a mirror running? (switchyard links status {link.id})"
        )
    failed = [f"{k[0]}[{k[1]}]: {s.error}" for k, s in sorted(reported.items()) if s.error]
    if failed:
        raise Refused(f"the mirror stopped copying {'; '.join(failed[:3])}")


def _unlocked(store: RoutingStore, keys: list[BindingKey], saga: str) -> None:
    locks = SagaLocks(store.zk, store.layout)
    for key in keys:
        try:
            holder = locks.holder(key)
        except RoutingError as exc:
            raise Refused(str(exc)) from exc
        if holder is not None and holder.owner != saga:
            raise Refused(f"{key} is locked by saga {holder.owner} since {holder.acquired_at}")
