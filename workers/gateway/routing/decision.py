"""What the gateway does with one request: a pure function of the request, its identity's routing and
the connection it came in on.

The session carries the decision out (forwards, answers, holds); keeping the choice here, free of
sockets and shared state, lets every API be checked against every routing state in unit tests.

- ``FORWARD``: to the cluster the identity is bound to, to the listener's broker when the connection
  came in on a virtual broker of that cluster, else to any of its brokers (``BrokerDirectory.any_broker``);
- ``ANSWER``: the gateway answers itself (Metadata with an empty topic list);
- ``HOLD``: the identity is blocked (or writes to a cluster shielded a moment ago, see ``SHIELD``): the
  request waits until its routing changes or the hold time passes, and is then answered as the routing
  of that moment says (see :mod:`workers.gateway.routing.holds`);
- ``REDIRECT``: a virtual broker of a cluster the identity has left: the retriable error now, so the
  client looks up where to go. Not an OffsetFetch: it changes nothing, and librdkafka, refused twice
  more on the same broker, tells the application it could not fetch committed offsets; it is forwarded
  to the group's coordinator on the cluster the identity is bound to;
- ``REFUSE``: a Produce to a mirror's copy, refused for good (TOPIC_AUTHORIZATION_FAILED);
- ``CARRY``: an OffsetCommit from a group member that joined on another cluster than the one its
  identity is bound to now (it joined before a switch): committed on the new cluster in the form a
  coordinator takes for a group without members, translated through the link's offset map (see
  :mod:`workers.gateway.groups.carry`), so what the application processed stays committed across the switch;
- ``REJOIN``: a Heartbeat from a member that joined on the cluster the identity has left: answered
  here with REBALANCE_IN_PROGRESS, the usual request to rejoin. Forwarded, it would get
  UNKNOWN_MEMBER_ID from a coordinator that never knew the member, and some clients (kafka-python,
  aiokafka) then drop their membership at once, from a background thread, so the application's next
  commit fails before it is even sent; asked to rejoin, they stay members until their next poll;
- ``QUIET``: such a Heartbeat when the member's connection is already rejoining the group on the new
  cluster (kafkajs heartbeats its old membership while its new join waits): answered here without
  error. Asked to rejoin, kafkajs would start a second rebalance once the first ends — one more join
  round, 15 s at its defaults on the test broker;
- ``RELEASE``: a ConsumerGroupHeartbeat (KIP-848) from a member that joined on the cluster the identity
  has left and may still own partitions: answered here without error and with an assignment of
  nothing, so it revokes them as in any rebalance, and may commit what it processed meanwhile;
- ``FENCE``: such a heartbeat from a member that owns nothing (its acknowledgement of that release), or
  whose release ran out: answered here with FENCED_MEMBER_EPOCH, so it joins again where it is routed
  now (see :mod:`workers.gateway.groups.consumer_protocol`);
- ``ADOPT``: an OffsetCommit from outside the group (no member, generation -1) on a connection whose
  consumer is rejoining its group, its join entered (not only a member id asked for) — a client that
  reset its membership when the new cluster did not know it, and commits what it processed meanwhile;
  refused while the group rebalances, it is sent once the rejoin is done, as the member the connection
  rejoined as; so is a commit of that member at a generation before its join's answer (kafkajs commits
  with its last sync's generation while its next join waits for its sync), or sent behind that join
  before it was answered (the broker would take it in the join's generation), where the sync assigned it
  every partition the commit names;
- ``DROP``: a Produce with acks=0 that may not land: it expects no answer, so nothing is sent;
- ``SHIELD``: the identity is routed to a shielded (or down) cluster, which is not contacted at all: a
  partition or group request, a FindCoordinator or an InitProducerId gets a retriable error at once
  (a Metadata request is answered here, ``ANSWER``), so clients of a dead cluster fail fast and retry
  instead of waiting out connection time-outs, and the gateway stays healthy for everyone else. A write
  (a Produce expecting an answer, not a transaction's) within a minute of the shield is a ``HOLD``
  instead, as a blocked identity's is: a failover shields its source before its flip, and a flip slowed
  by a target in trouble (a broker of it killed: 14 s in a chaos trial) outlasted kafkajs's retries,
  answered at once (sends failed); held, it goes where the flip sends it, or gets the retriable error
  once its hold time is over;
- ``UNFOUND``: a FindCoordinator for a blocked group of the consumer protocol (KIP-848, as any gateway
  process saw: :mod:`workers.gateway.groups.protocols`), on a connection that carried no producer's
  request: COORDINATOR_NOT_AVAILABLE at once. librdkafka's member, its commit held and
  answered NOT_COORDINATOR (held no longer than its 5 s heartbeat allows, ``holds.KIP848_HEARTBEAT_S``),
  looks its coordinator up again and sends the commit once it has one, parking it (45 s at most) after
  three sends. Its coordinator found at once, it sent the commit into the block again and again and gave
  it up to the application after about 21 s (a chaos trial: its batch processed twice); told there is
  none yet, it asks every half second and sends the commit where the flip (or the block's end) routes
  the group. A producer's lookup of a group (its TxnOffsetCommit) is forwarded: librdkafka's transactional
  producer asks for it a few times only, and then waits for a connection to change;
- ``SPLIT``: a partition request naming a partition a migration moved: split per cluster and broker,
  answered in client offsets (see :mod:`workers.gateway.migrated.partitions`); a write to a partition whose
  migration is about to take effect is held like a blocked identity's.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from switchyard.model import BindingState
from switchyard.resolution import Resolution
from workers.gateway.brokers.vnodes import RealBroker
from workers.gateway.migrated.partitions import Touch
from workers.gateway.routing import apis
from workers.gateway.routing.apis import Context
from workers.gateway.routing.blocking import TOPIC_AUTHORIZATION_FAILED, OwnAnswer


class Action(enum.Enum):
    FORWARD = "forward"
    ANSWER = "answer"
    HOLD = "hold"
    REDIRECT = "redirect"
    REFUSE = "refuse"
    CARRY = "carry"
    REJOIN = "rejoin"
    QUIET = "quiet"
    FENCE = "fence"
    RELEASE = "release"
    ADOPT = "adopt"
    DROP = "drop"
    SHIELD = "shield"
    UNFOUND = "unfound"
    SPLIT = "split"


@dataclass(frozen=True)
class Decision:
    action: Action
    cluster: str
    node: int | None = None
    """The real broker to forward to (None: any of the cluster's brokers)."""
    source: str | None = None
    """For ``CARRY``: the cluster the committing member joined on."""

    @property
    def answer(self) -> OwnAnswer | None:
        """The gateway's own answer, for an action that answers without sending (a ``HOLD``'s once its
        time is over)."""
        return _ANSWERS.get(self.action)


_ANSWERS = {
    Action.REJOIN: OwnAnswer(ErrorCode.rebalance_in_progress),
    Action.QUIET: OwnAnswer(ErrorCode.none),
    Action.FENCE: OwnAnswer(ErrorCode.fenced_member_epoch),
    Action.RELEASE: OwnAnswer(ErrorCode.none, release=True),
    Action.REFUSE: OwnAnswer(TOPIC_AUTHORIZATION_FAILED),
    Action.REDIRECT: OwnAnswer(),
    Action.HOLD: OwnAnswer(),
    Action.SHIELD: OwnAnswer(),
    Action.UNFOUND: OwnAnswer(),
}


def decide(
    api_key: int,
    context: Context,
    resolution: Resolution,
    broker: RealBroker | None,
    *,
    empty_metadata: bool = False,
    mirrored: Callable[[str], bool] = lambda _topic: False,
    joined_on: str | None = None,
    rejoining: bool = False,
    owning: bool = False,
    partitions: Touch = Touch.NONE,
    shielded: bool = False,
    shield_holds: bool = False,
    unvouched: bool = False,
    coordinator_waits: bool = False,
) -> Decision:
    """``broker``: the real broker the connection's listener stands for (None: the bootstrap port);
    ``empty_metadata``: a Metadata request with an empty topic list; ``mirrored(topic)``: whether the
    topic on the resolved cluster is a mirror's copy; ``joined_on``: for an OffsetCommit or a
    Heartbeat (classic, or of a member of the consumer protocol), the cluster its member joined on,
    where the gateway saw the join (None: unknown, no member, or a commit no link could carry from
    there); ``rejoining``:
    for an OffsetCommit from outside the group or a Heartbeat, that the connection's consumer is
    rejoining its group; ``owning``: for a ConsumerGroupHeartbeat, that its member may own partitions
    and is to be asked to give them up (``RELEASE``); ``partitions``: what the request has to do with
    partition migrations;
    ``shielded``: the resolved cluster is shielded or down; ``shield_holds``: its shield is fresh and the
    request is no transaction's, so a write is held for a routing change; ``unvouched``: the gateway
    cannot vouch that its routing is current (:meth:`Gateway.vouched`): ``apis.UNVOUCHED_HELD`` is held
    as for a block; ``coordinator_waits``: a FindCoordinator for a group of the consumer protocol, from a
    client that is not a producer, is told there is no coordinator while the group is blocked."""
    cluster = resolution.cluster
    if coordinator_waits and api_key == apis.FIND_COORDINATOR and resolution.state is BindingState.BLOCKED:
        return Decision(Action.UNFOUND, cluster)
    if api_key == apis.METADATA and (empty_metadata or shielded):
        return Decision(Action.ANSWER, cluster)
    if unvouched and api_key in apis.UNVOUCHED_HELD:
        return Decision(Action.HOLD, cluster) if context.expects_response else Decision(Action.DROP, cluster)
    decision = _decide(
        api_key, context, resolution, broker, mirrored=mirrored, joined_on=joined_on, rejoining=rejoining,
        owning=owning, partitions=partitions,
    )  # fmt: skip
    if shielded and decision.action in _CONTACTING and api_key in apis.SHIELDABLE:
        waits = api_key == apis.PRODUCE and context.expects_response and shield_holds
        decision = Decision(Action.HOLD if waits else Action.SHIELD, cluster)
    if not context.expects_response and decision.action in _ANSWERED_HERE:
        return Decision(Action.DROP, cluster)
    return decision


_ANSWERED_HERE = frozenset({
    Action.HOLD, Action.REDIRECT, Action.REFUSE, Action.REJOIN, Action.QUIET, Action.FENCE, Action.RELEASE,
    Action.SHIELD, Action.UNFOUND,
})  # fmt: skip
_CONTACTING = frozenset({Action.FORWARD, Action.CARRY, Action.ADOPT})


def _decide(
    api_key: int,
    context: Context,
    resolution: Resolution,
    broker: RealBroker | None,
    *,
    mirrored: Callable[[str], bool],
    joined_on: str | None,
    rejoining: bool,
    owning: bool,
    partitions: Touch,
) -> Decision:
    cluster = resolution.cluster
    if api_key in apis.BLOCKABLE:
        if resolution.state is BindingState.BLOCKED or partitions is Touch.HELD:
            return Decision(Action.HOLD, cluster)
        if partitions is Touch.SPLIT and not (
            api_key == apis.PRODUCE and any(mirrored(t) for t in context.topics)
        ):
            node = broker.node_id if broker is not None and broker.cluster == cluster else None
            return Decision(Action.SPLIT, cluster, node)
        if api_key == apis.OFFSET_COMMIT and joined_on is not None and joined_on != cluster:
            return Decision(Action.CARRY, cluster, source=joined_on)
        if api_key == apis.HEARTBEAT and joined_on is not None and joined_on != cluster:
            return Decision(Action.QUIET if rejoining else Action.REJOIN, cluster)
        if api_key == apis.CONSUMER_GROUP_HEARTBEAT and joined_on is not None and joined_on != cluster:
            return Decision(Action.RELEASE if owning else Action.FENCE, cluster)
        if broker is not None and broker.cluster != cluster:
            if api_key == apis.OFFSET_FETCH:  # to the group's coordinator, by way of any broker
                return Decision(Action.FORWARD, cluster)
            return Decision(Action.REDIRECT, cluster)
        if api_key == apis.OFFSET_COMMIT and rejoining:
            return Decision(Action.ADOPT, cluster, broker.node_id if broker is not None else None)
    if api_key == apis.PRODUCE and any(mirrored(t) for t in context.topics):
        return Decision(Action.REFUSE, cluster)
    node = broker.node_id if broker is not None and broker.cluster == cluster else None
    return Decision(Action.FORWARD, cluster, node)
