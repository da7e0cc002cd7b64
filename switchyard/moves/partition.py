"""Whether a partition may migrate (seed 004), and from where: the checks a partition migration's plan
makes before anything changes, and what ``migrate-partition --dry-run`` prints. Reads only.

The origin is the cluster the topic's users are routed to: the gateways' usage reports name them, and
their bindings say where they go (an unused topic goes where unbound clients go, the default cluster).
A topic whose users are on several clusters is refused — a migration applies to everyone routed to its
origin, and the others would read a partition that no longer grows.
"""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from switchyard import kafka
from switchyard.acked import acked_end
from switchyard.config import Config
from switchyard.identity import Identity
from switchyard.model import ClusterState, LinkState, PartitionId
from switchyard.resolution import resolve
from switchyard.routing.snapshot import RoutingSnapshot
from switchyard.routing.store import RoutingStore
from switchyard.sagas.steps import PartitionPlan, PartitionPlanRequest
from switchyard.usage import read_usage

PROBE_S = 1.5
"""A fault migration's origin must not answer a metadata request within this."""


def plan_partition(store: RoutingStore, config: Config, request: PartitionPlanRequest) -> PartitionPlan:
    plan = PartitionPlan()
    try:
        _check(store, config, request, plan)
    except Refusal as refusal:
        plan.refusal = str(refusal)
    return plan


class Refusal(Exception):
    """Why the partition must not migrate."""


def _check(store: RoutingStore, config: Config, request: PartitionPlanRequest, plan: PartitionPlan) -> None:
    partition = PartitionId(request.topic, request.partition)
    try:
        partition.check()
    except ValueError as exc:
        raise Refusal(str(exc)) from None
    snapshot = store.snapshot()
    plan.origin = _origin(store, config, snapshot, request.topic)
    plan.checks.append(f"{request.topic}'s users are routed to {plan.origin}")
    if plan.origin == request.target:
        raise Refusal(f"{request.topic} is on {request.target} already")
    target = snapshot.clusters.get(request.target)
    if target is None or request.target not in config.clusters:
        raise Refusal(f"cluster {request.target!r} is not registered and configured")
    if target.state is not ClusterState.ACTIVE:
        raise Refusal(f"cluster {request.target!r} is {target.state} and takes no new traffic")
    existing = snapshot.migrations.get(partition)
    if existing is not None:
        raise Refusal(
            f"{partition} is {existing.state} from {existing.origin} to {existing.target} since epoch "
            f"{existing.epoch}: one migration per partition"
        )
    for link in snapshot.links.values():
        between = plan.origin in (link.source, link.target)
        if link.state is not LinkState.PROMOTED and between and link.copies(request.topic):
            raise Refusal(
                f"link {link.id} copies {request.topic} between {link.source} and {link.target}: a partition "
                "whose writes leave the cluster would stop growing there (remove the link first)"
            )
    if request.fault:
        _check_fault(store, config, request, plan)
        return
    count = _partitions(config.clusters[plan.origin].bootstrap, request.topic)
    if count is None:
        raise Refusal(f"{request.topic} does not exist on {plan.origin}")
    if request.partition >= count:
        raise Refusal(f"{request.topic} has {count} partitions on {plan.origin}: there is no {partition}")
    on_target = _partitions(config.clusters[request.target].bootstrap, request.topic)
    if on_target is not None and on_target != count:
        raise Refusal(
            f"{request.topic} has {on_target} partitions on {request.target} and {count} on {plan.origin}: "
            "a migrated partition must keep its number"
        )
    plan.checks.append(
        f"{request.topic} has {count} partitions on {plan.origin}; "
        + (f"{on_target} on {request.target}" if on_target else f"it is created on {request.target}")
    )


def _check_fault(
    store: RoutingStore, config: Config, request: PartitionPlanRequest, plan: PartitionPlan
) -> None:
    """A fault migration is for an origin that does not answer (else its end can be read exactly); the
    topic must already be on the target, as the origin cannot say how many partitions it has."""
    if answers(config.clusters[plan.origin].bootstrap):
        raise Refusal(f"{plan.origin} answers: migrate smoothly (its end is read exactly, no gap)")
    plan.checks.append(f"{plan.origin} does not answer within {PROBE_S:g}s")
    acked = acked_end(store.zk, store.layout, plan.origin, request.topic, request.partition)
    if acked is None:
        raise Refusal(
            f"no gateway saw a write to {request.topic}[{request.partition}] acknowledged on {plan.origin}: "
            "its end offset cannot be chosen beyond what it holds (wait for it to answer; migrate smoothly)"
        )
    plan.checks.append(f"the gateways saw its writes acknowledged up to offset {acked}")
    on_target = _partitions(config.clusters[request.target].bootstrap, request.topic)
    if on_target is None or request.partition >= on_target:
        raise Refusal(
            f"{request.topic} must exist on {request.target} with as many partitions as on {plan.origin} "
            "(the origin cannot be asked how many): create it there first"
        )
    plan.checks.append(f"{request.topic} has {on_target} partitions on {request.target}")


def answers(bootstrap: str) -> bool:
    """Whether a cluster answers a metadata request within ``PROBE_S``."""
    try:
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=PROBE_S)
    except KafkaException:
        return False
    return True


def _origin(store: RoutingStore, config: Config, snapshot: RoutingSnapshot, topic: str) -> str:
    found = routed_users(store, config, snapshot, topic)
    if len(found) > 1:
        raise Refusal(f"{topic}'s users are routed to {', '.join(sorted(found))}: migrate from one cluster")
    return found.popitem()[0] if found else config.default_cluster


def routed_users(
    store: RoutingStore, config: Config, snapshot: RoutingSnapshot, topic: str
) -> dict[str, list[str]]:
    """The clients the gateways saw use ``topic`` lately, by the cluster they are routed to."""
    window_s = config.gateway.usage_window_s
    uses = [u for u in read_usage(store.zk, store.layout, within_s=window_s) if u.topic == topic]
    found: dict[str, list[str]] = {}
    for use in uses:
        identity = Identity(use.app, use.instance)
        cluster = resolve(identity, snapshot.bindings, config.default_cluster, topics=(topic,)).cluster
        found.setdefault(cluster, []).append(str(identity))
    return found


def _partitions(bootstrap: str, topic: str) -> int | None:
    try:
        return len(kafka.partitions(bootstrap, lambda name: name == topic)) or None
    except KafkaException as exc:
        raise Refusal(f"cannot read {topic}'s partitions: {exc}") from None
