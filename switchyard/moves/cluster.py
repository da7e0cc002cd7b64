"""What a cluster evacuation moves, in which batches — or what stops it before anything moves.

Every topic of the source moves, and with it every application the gateways saw use one. An application's
topics move together (its clients would otherwise be routed to two clusters at once), so do the topics of
applications sharing one: the batches are made of these sets, whole. A set's keys are those that route its
uses to the source now (an application's key, or a more specific one of its own), so each batch is one
planned switch of those keys (:mod:`workflows.planned`), along the evacuation's link, which it splits.

Stops the evacuation, named in the plan (``cannot_move``): a topic written to while the plan watched
with no producer seen through a gateway (a writer around it, whose records the switch would lose), a
setting of a topic the target refuses, a topic the target holds records of already, an operator's plan
that splits an application's topics or leaves a topic out, a key blocked by another saga.

Reads only; the saga's first step, and what ``evacuate --dry-run`` prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient

from switchyard import kafka
from switchyard.config import Config
from switchyard.errors import KafkaOperationError
from switchyard.identity import Identity
from switchyard.keys import BindingKey
from switchyard.model import BindingState, ClusterState, LinkState
from switchyard.planning import Refused
from switchyard.resolution import resolve
from switchyard.routing.snapshot import RoutingSnapshot
from switchyard.routing.store import RoutingStore
from switchyard.sagas.evacuations import (
    BUSY_FIRST,
    BY_NAME,
    EvacuationBatch,
    EvacuationPlan,
    EvacuationPlanRequest,
)
from switchyard.topic_copies import refused_settings
from switchyard.usage import CONSUME, PRODUCE, Use, read_usage

INTERNAL_PREFIXES = ("__", "switchyard.")
"""Kafka's own topics (offsets, transactions) and Switchyard's (the offset maps): never moved."""


@dataclass
class Users:
    """One set of applications sharing topics (or one topic nobody was seen use), and the keys that
    route their uses of those topics to the source."""

    topics: set[str]
    apps: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    producers: set[str] = field(default_factory=set)
    """Its topics some application produced to through a gateway."""


def plan_evacuation(
    store: RoutingStore,
    config: Config,
    request: EvacuationPlanRequest,
    *,
    beat: Callable[[str], None] = lambda _: None,
) -> EvacuationPlan:
    """The plan for ``request``; while ``cannot_move`` names anything, nothing in it is to be run."""
    plan = EvacuationPlan(request.source, request.target, request.link)
    try:
        _plan(store, config, request, plan, beat)
    except Refused as refused:
        plan.cannot_move.append(str(refused))
    except KafkaOperationError as exc:
        plan.cannot_move.append(f"cannot read the clusters: {exc}")
    return plan


def _plan(
    store: RoutingStore,
    config: Config,
    request: EvacuationPlanRequest,
    plan: EvacuationPlan,
    beat: Callable[[str], None],
) -> None:
    source, target = request.source, request.target
    snapshot = store.snapshot()
    _clusters_take_it(snapshot, config, source, target)
    plan.checks.append(f"{target} is active, and {source} is registered")
    if config.default_cluster == source:
        plan.checks.append(
            f"note: {source} is the default cluster: clients no binding routes and no gateway saw (within "
            f"the window) stay routed to it after the move; make {target} the default (default_cluster) then"
        )
    bootstrap = config.clusters[source].bootstrap
    counts = _topics(bootstrap)
    copies = _copies_of_others(snapshot, source, counts)
    if copies:
        plan.checks.append(
            f"{len(copies)} topics on {source} are copies other clusters' links keep ({_listed(copies)}): "
            "not moved, they are not its own"
        )
        counts = {t: n for t, n in counts.items() if t not in copies}
    if not counts:
        raise Refused(f"{source} holds no topic of its own to move")
    _no_other_link(snapshot, plan, counts)
    within_s = request.within_s or config.gateway.usage_window_s
    uses = [u for u in read_usage(store.zk, store.layout, within_s=within_s) if u.topic in counts]
    beat(f"watching {sum(counts.values())} partitions of {source} for {request.watch_s:g}s")
    written = _written(bootstrap, counts, request.watch_s)
    sets = users(uses, counts, snapshot, default_cluster=config.default_cluster, source=source,
                 cannot_move=plan.cannot_move)  # fmt: skip
    plan.checks.append(
        f"{len(counts)} topics ({sum(counts.values())} partitions) on {source}; "
        f"{len({u.app for u in uses})} applications seen use them within {within_s:g}s"
    )
    for found in sets:
        for topic in sorted(found.topics - found.producers):
            if written.get(topic):
                plan.cannot_move.append(
                    f"{topic}: {written[topic]} records written in {request.watch_s:g}s and no application "
                    f"seen produce to it through a gateway within {within_s:g}s: a writer around the "
                    "gateways, whose records a switch would lose (route it through a gateway first)"
                )
    plan.unused = sorted(t for found in sets if not found.apps for t in found.topics)
    plan.batches = _batches(sets, counts, written, request, plan.cannot_move)
    plan.checks.append(
        f"{len(plan.batches)} batches of applications' topics, {len(plan.unused)} topics no application "
        "was seen use (copied, checked exact and retired at the end)"
    )
    _target_takes_copies(snapshot, config, plan, counts)
    plan.checks.append(f"{target} takes every topic's settings and holds none of their records")


def _clusters_take_it(snapshot: RoutingSnapshot, config: Config, source: str, target: str) -> None:
    if source == target:
        raise Refused(f"{source} cannot be evacuated to itself")
    for name in (source, target):
        if name not in config.clusters:
            raise Refused(f"{name} is not a configured cluster")
    cluster = snapshot.clusters.get(target)
    if cluster is None or cluster.state is not ClusterState.ACTIVE:
        why = cluster.state if cluster else "not registered"
        raise Refused(f"the target cluster {target} is {why}: it takes no new traffic")
    if source not in snapshot.clusters:
        raise Refused(f"{source} is not registered (switchyard clusters list)")


def _copies_of_others(snapshot: RoutingSnapshot, source: str, topics: Iterable[str]) -> set[str]:
    """The topics a link copies onto ``source`` from elsewhere: a batch an earlier run moved (its reverse
    link), a copy kept for disaster recovery; the cluster they come from holds the records."""
    into = [
        link for link in snapshot.links.values() if link.target == source and link.state is LinkState.RUNNING
    ]
    return {t for t in topics if any(link.copies(t) for link in into)}


def _no_other_link(snapshot: RoutingSnapshot, plan: EvacuationPlan, counts: Mapping[str, int]) -> None:
    """Two writers of a copy would interleave: the evacuation's link must be the only one copying its
    topics out of the source."""
    for link in sorted(snapshot.links.values(), key=lambda link: link.id):
        if link.id == plan.link or link.source != plan.source or link.state is not LinkState.RUNNING:
            continue
        copied = sorted(t for t in counts if link.copies(t))
        if copied and not link.id.startswith(f"{plan.link}-"):  # a batch's split, left by an earlier run
            plan.cannot_move.append(
                f"link {link.id} copies {_listed(copied)} from {plan.source} to {link.target} already: "
                "remove it (or exclude them) first, the evacuation copies with a link of its own"
            )


def _listed(names: list[str] | set[str]) -> str:
    ordered = sorted(names)
    return ", ".join(ordered[:5]) + (f" and {len(ordered) - 5} more" if len(ordered) > 5 else "")


def _topics(bootstrap: str) -> dict[str, int]:
    listed = kafka.partitions(bootstrap, lambda name: not name.startswith(INTERNAL_PREFIXES))
    counts: dict[str, int] = {}
    for topic, _ in listed:
        counts[topic] = counts.get(topic, 0) + 1
    return counts


def _written(bootstrap: str, counts: Mapping[str, int], watch_s: float) -> dict[str, int]:
    """Records written to each topic while watched for ``watch_s``."""
    keys = [(t, p) for t, n in counts.items() for p in range(n)]
    before = kafka.ends_of(bootstrap, keys)
    time.sleep(watch_s)
    after = kafka.ends_of(bootstrap, keys)
    written: dict[str, int] = {}
    for (topic, partition), end in after.items():
        written[topic] = written.get(topic, 0) + max(0, end - before.get((topic, partition), end))
    return written


def users(
    uses: Iterable[Use],
    topics: Iterable[str],
    snapshot: RoutingSnapshot,
    *,
    default_cluster: str,
    source: str,
    cannot_move: list[str],
) -> list[Users]:
    """The topics in sets an evacuation cannot divide: those of each application, joined where applications
    share one; each with the keys that route its uses to ``source`` (an application's key where no
    binding routes it, which the switch then binds). Uses routed elsewhere are not the source's."""
    parent = {t: t for t in topics}

    def root(topic: str) -> str:
        while parent[topic] != topic:
            parent[topic] = parent[parent[topic]]
            topic = parent[topic]
        return topic

    first: dict[str, str] = {}
    keyed: list[tuple[Use, BindingKey]] = []
    for use in uses:
        if use.role not in (PRODUCE, CONSUME) or use.topic not in parent:
            continue
        identity = Identity(use.app, instance=use.instance)
        deciding = resolve(identity, snapshot.bindings, default_cluster, topics=[use.topic], group=use.group)
        if deciding.cluster != source:
            continue
        if deciding.state is BindingState.BLOCKED:
            cannot_move.append(f"{deciding.keys[0]} is blocked: another saga is switching it")
        key = deciding.keys[0] if deciding.keys else BindingKey.for_app(use.app)
        keyed.append((use, key))
        if use.app in first:
            parent[root(use.topic)] = root(first[use.app])
        else:
            first[use.app] = use.topic
    found: dict[str, Users] = {}
    for topic in parent:
        found.setdefault(root(topic), Users(set())).topics.add(topic)
    for use, key in keyed:
        entry = found[root(use.topic)]
        entry.apps.add(use.app)
        entry.keys.add(str(key))
        if use.role == PRODUCE:
            entry.producers.add(use.topic)
    return sorted(found.values(), key=lambda u: min(u.topics))


def _batches(
    sets: list[Users],
    counts: Mapping[str, int],
    written: Mapping[str, int],
    request: EvacuationPlanRequest,
    cannot_move: list[str],
) -> list[EvacuationBatch]:
    if request.batches:
        groups = _as_planned(sets, request.batches, cannot_move)
    else:
        groups = packed(_ordered([s for s in sets if s.apps], written, request.order), request.batch_topics)
    return [
        EvacuationBatch(
            number=n,
            topics=sorted(t for s in group for t in s.topics),
            apps=sorted(a for s in group for a in s.apps),
            keys=sorted(k for s in group for k in s.keys),
            partitions=sum(counts[t] for s in group for t in s.topics),
            written=sum(written.get(t, 0) for s in group for t in s.topics),
        )
        for n, group in enumerate(groups, start=1)
    ]


def _ordered(sets: list[Users], written: Mapping[str, int], order: str) -> list[Users]:
    def traffic(found: Users) -> int:
        return sum(written.get(t, 0) for t in found.topics)

    if order == BY_NAME:
        return sorted(sets, key=lambda s: min(s.topics))
    return sorted(sets, key=lambda s: (-traffic(s) if order == BUSY_FIRST else traffic(s), min(s.topics)))


def packed(sets: list[Users], most: int) -> list[list[Users]]:
    """Consecutive sets, in order, into batches of at most ``most`` topics (a set larger than that is a
    batch alone; 0: every set a batch)."""
    batches: list[list[Users]] = []
    size = 0
    for found in sets:
        if not batches or most <= 0 or size + len(found.topics) > most:
            batches.append([])
            size = 0
        batches[-1].append(found)
        size += len(found.topics)
    return batches


def _as_planned(sets: list[Users], planned: list[list[str]], cannot_move: list[str]) -> list[list[Users]]:
    """The operator's batches (``--plan FILE``), refused where they leave a used topic out, name one the
    source does not hold, or divide a set; the unused topics they list are retired at the end anyway."""
    batch_of: dict[str, int] = {}
    known = {t for s in sets for t in s.topics}
    for number, topics in enumerate(planned, start=1):
        for topic in topics:
            if topic in batch_of:
                cannot_move.append(f"the plan lists {topic} in batches {batch_of[topic]} and {number}")
            elif topic not in known:
                cannot_move.append(f"the plan lists {topic} (batch {number}), which the source does not hold")
            batch_of.setdefault(topic, number)
    grouped: dict[int, list[Users]] = {}
    for found in sets:
        if not found.apps:  # unused: listed or not, retired at the end
            continue
        numbers = {batch_of.get(t, 0) for t in found.topics}
        if 0 in numbers:
            left = sorted(t for t in found.topics if t not in batch_of)
            cannot_move.append(
                f"the plan leaves out {', '.join(left[:5])}, used by {', '.join(sorted(found.apps))}"
            )
            continue
        if len(numbers) > 1:
            where = ", ".join(f"{t} in batch {batch_of[t]}" for t in sorted(found.topics))
            cannot_move.append(
                f"{', '.join(sorted(found.apps))} use {where}: an application's topics move in one batch"
            )
            continue
        (number,) = numbers
        grouped.setdefault(number, []).append(found)
    return [grouped[n] for n in sorted(grouped)]


def _target_takes_copies(
    snapshot: RoutingSnapshot, config: Config, plan: EvacuationPlan, counts: Mapping[str, int]
) -> None:
    """The copies start empty, with every setting of their topics: records already on the target would be
    taken for the source's, and a setting it refuses would be lost."""
    target = config.clusters[plan.target].bootstrap
    if plan.link not in snapshot.links:  # a rerun's copies are the evacuation's own
        held = kafka.partitions(target, lambda name: name in counts)
        records = kafka.ends_of(target, held) if held else {}
        for topic in sorted({t for (t, _), end in records.items() if end}):
            plan.cannot_move.append(
                f"{topic} exists on {plan.target} with records: the copy needs it empty or absent"
            )
    source_admin = AdminClient({"bootstrap.servers": config.clusters[plan.source].bootstrap})
    target_admin = AdminClient({"bootstrap.servers": target})
    for topic, why in sorted(refused_settings(source_admin, target_admin, counts).items()):
        plan.cannot_move.append(
            f"{topic}: {plan.target} refuses its settings {why}; remove them on {plan.source} "
            "(kafka-configs --alter --delete-config) before the move"
        )
