"""Who moves with a topic: the applications the gateways saw produce to it or consume it, and the keys
that move them — or why the topic must not move.

A topic migration moves each user's topic key (``AppID#Topic``) and, for consumers in a group, the
group's key (``AppID##Group``), so the applications' other topics stay where they are. A group moves
whole (its coordinator and every offset it commits), so a group that also consumes other topics is
refused: its offsets for those would be committed on a cluster that does not hold them.

Reads only; the saga's first step, and what ``migrate-topic --dry-run`` prints.
"""

from __future__ import annotations

from switchyard import kafka
from switchyard.config import Config
from switchyard.errors import KafkaOperationError
from switchyard.keys import BindingKey
from switchyard.model import BindingState, ClusterState, LinkState
from switchyard.planning import Refused, effective
from switchyard.routing.snapshot import RoutingSnapshot
from switchyard.routing.store import RoutingStore
from switchyard.sagas.steps import TopicUser, TopicUsers, UsersRequest
from switchyard.usage import CONSUME, PRODUCE, Use, read_usage


def find_users(store: RoutingStore, config: Config, request: UsersRequest) -> TopicUsers:
    """The topic's users and their keys; ``refusal`` says why the topic must not move."""
    found = TopicUsers(request.topic)
    try:
        _find(store, config, request, found)
    except Refused as refused:
        found.refusal = str(refused)
    return found


def _find(store: RoutingStore, config: Config, request: UsersRequest, found: TopicUsers) -> None:
    topic, target = request.topic, request.target
    within_s = request.within_s or config.gateway.usage_window_s
    uses = read_usage(store.zk, store.layout, within_s=within_s)
    found.users = _users(uses, topic)
    if not found.users:
        raise Refused(
            f"no application used {topic} through a gateway in the last {within_s:g}s: nothing "
            "would move with it (clients that go straight to the brokers are not seen)"
        )
    groups = sorted({(u.app, u.group) for u in found.users if u.group is not None})
    _groups_stay_whole(uses, topic, groups)
    _requests_name_it_alone(uses, topic)
    keys = sorted(
        {BindingKey.topic(u.app, topic) for u in found.users} | {BindingKey.group(a, g) for a, g in groups},
        key=str,
    )
    found.keys = [str(k) for k in keys]
    found.checks.append(
        f"{len(found.users)} uses by {len({u.app for u in found.users})} applications, "
        f"{len(groups)} consumer groups, seen within {within_s:g}s"
    )
    snapshot = store.snapshot()
    found.source = _one_source(snapshot, config, keys)
    found.checks.append(f"every key routed to {found.source} now, none blocked")
    _target_takes_it(snapshot, found.source, target)
    found.checks.append(f"target cluster {target} is active")
    found.partitions = _on_source(config, found.source, topic)
    found.checks.append(f"{topic} has {found.partitions} partitions on {found.source}")
    _no_other_copy(snapshot, config, topic, target, request.link)
    found.checks.append(f"no other link copies {topic} to {target}, and {target} holds no records of it")


def _users(uses: list[Use], topic: str) -> list[TopicUser]:
    seen = {(u.app, u.role, u.group) for u in uses if u.topic == topic and u.role in (PRODUCE, CONSUME)}
    return [
        TopicUser(app, role, group)
        for app, role, group in sorted(seen, key=lambda s: (s[0], s[1], s[2] or ""))
    ]


def _groups_stay_whole(uses: list[Use], topic: str, groups: list[tuple[str, str]]) -> None:
    elsewhere = sorted(
        {
            f"{u.app}##{u.group} also consumes {u.topic}"
            for u in uses
            if u.role == CONSUME and (u.app, u.group) in groups and u.topic not in ("", topic)
        }
    )
    if elsewhere:
        raise Refused(
            f"{'; '.join(elsewhere[:5])}: a group moves whole, and its offsets for those topics would be "
            "committed where the topics are not; migrate them together, or switch the application"
        )


def _requests_name_it_alone(uses: list[Use], topic: str) -> None:
    """A client that produces to (or fetches) the topic and others in one request follows their topic
    keys only while they all agree, so it would stay behind on the source."""
    clients = {(u.app, u.instance, u.role) for u in uses if u.topic == topic and u.role in (PRODUCE, CONSUME)}
    verbs = {PRODUCE: "produces to", CONSUME: "consumes"}
    mixed = sorted(
        {
            f"{u.app}@{u.instance or '-'} {verbs[u.role]} {u.topic} too"
            for u in uses
            if (u.app, u.instance, u.role) in clients and u.topic not in ("", topic)
        }
    )
    if mixed:
        raise Refused(
            f"{'; '.join(mixed[:5])}: one client's requests name both topics and would not move; migrate "
            "them together, or switch the application"
        )


def _one_source(snapshot: RoutingSnapshot, config: Config, keys: list[BindingKey]) -> str:
    where: dict[str, list[str]] = {}
    for key in keys:
        cluster, state = effective(key, snapshot, config.default_cluster)
        if state is BindingState.BLOCKED:
            raise Refused(f"{key} is blocked: another saga is switching it (switchyard sagas list)")
        where.setdefault(cluster, []).append(str(key))
    if len(where) > 1:
        named = "; ".join(f"{', '.join(k)} on {c}" for c, k in sorted(where.items()))
        raise Refused(f"the topic's users are routed to different clusters: {named}")
    return next(iter(where))


def _target_takes_it(snapshot: RoutingSnapshot, source: str, target: str) -> None:
    if target == source:
        raise Refused(f"the topic's users are on {target} already")
    cluster = snapshot.clusters.get(target)
    if cluster is None or cluster.state is not ClusterState.ACTIVE:
        why = cluster.state if cluster else "not registered"
        raise Refused(f"the target cluster {target} is {why}: it takes no new traffic")


def _on_source(config: Config, source: str, topic: str) -> int:
    try:
        partitions = kafka.partitions(config.clusters[source].bootstrap, lambda name: name == topic)
    except KafkaOperationError as exc:
        raise Refused(f"cannot list the topics of {source}: {exc}") from exc
    if not partitions:
        raise Refused(f"{topic} does not exist on {source}, where its users are routed")
    return len(partitions)


def _no_other_copy(snapshot: RoutingSnapshot, config: Config, topic: str, target: str, link_id: str) -> None:
    """Two writers of the target's copy would interleave, and records already there would be taken for
    the source's: the migration's link must be the only one, onto an empty topic."""
    for link in snapshot.links.values():
        others = link.id != link_id and link.target == target and link.state is not LinkState.PROMOTED
        if others and link.copies(topic):
            raise Refused(
                f"link {link.id} copies {topic} to {target} already: switch with it (switchyard "
                "switchover), or exclude the topic from it first"
            )
    if link_id in snapshot.links:
        return  # the migration's own copy, made by an earlier attempt
    bootstrap = config.clusters[target].bootstrap
    held = kafka.partitions(bootstrap, lambda name: name == topic)
    records = sum(kafka.ends_of(bootstrap, held).values()) if held else 0
    if records:
        raise Refused(f"{topic} exists on {target} with {records} records: the copy needs it empty or absent")
