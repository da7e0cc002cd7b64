"""The gateway's choice for each request, over every API kio knows and every routing state.

The invariants are what the switch relies on: nothing of a blocked identity reaches a broker, nothing
reaches a cluster the identity is not bound to, a request without an answer gets none, and only an
OffsetCommit of a member that joined elsewhere is carried.
"""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode

from switchyard.frames.protocol import decode_response, encode_request, known_versions
from switchyard.model import BindingState
from switchyard.resolution import Resolution
from workers.gateway.brokers.vnodes import RealBroker
from workers.gateway.routing import apis
from workers.gateway.routing.apis import Context
from workers.gateway.routing.decision import Action, Decision, decide

KEYS = [key for key in range(100) if known_versions(key) is not None]
LISTENERS = {  # the bootstrap port, a virtual broker of the bound cluster, one of the cluster left
    "bootstrap": None,
    "bound broker": RealBroker("standby", 7),
    "left broker": RealBroker("primary", 3),
}
SENDS = (Action.FORWARD, Action.CARRY)


def resolution(state: BindingState) -> Resolution:
    return Resolution("standby", state, (), 4, "test")


CASES = [
    case
    for case in itertools.product(
        KEYS,
        (BindingState.ACTIVE, BindingState.BLOCKED),
        LISTENERS,
        (True, False),  # expects a response (only a Produce with acks=0 does not)
        (True, False),  # a mirrored topic
        (None, "standby", "primary"),  # where the committing member joined
    )
    if case[3] or case[0] == apis.PRODUCE
]


def decided(
    key: int, state: BindingState, listener: str, answered: bool, mirrored: bool, joined_on: str | None
) -> Decision:
    context = Context(topics=("t",), group="g", expects_response=answered)
    return decide(
        key, context, resolution(state), LISTENERS[listener],
        mirrored=lambda _topic: mirrored, joined_on=joined_on,
    )  # fmt: skip


def test_every_api_kio_knows_is_covered() -> None:
    assert {apis.PRODUCE, apis.FETCH, apis.OFFSET_COMMIT, apis.HEARTBEAT, apis.METADATA} <= set(KEYS)
    assert len(KEYS) > 60


@pytest.mark.parametrize(("key", "state", "listener", "answered", "mirrored", "joined_on"), CASES)
def test_invariants(
    key: int, state: BindingState, listener: str, answered: bool, mirrored: bool, joined_on: str | None
) -> None:
    decision = decided(key, state, listener, answered, mirrored, joined_on)
    blockable = key in apis.BLOCKABLE
    assert decision.cluster == "standby"  # only ever the bound cluster
    if decision.action is Action.FORWARD and LISTENERS[listener] is not None:
        assert decision.node == (7 if listener == "bound broker" else None)
    if blockable and state is BindingState.BLOCKED:
        assert decision.action not in SENDS, "a blocked identity's request reached a broker"
    if blockable and listener == "left broker" and decision.action is Action.FORWARD:
        assert (key, decision.node) == (apis.OFFSET_FETCH, None), "sent on as a broker the identity left"
    if not answered:
        assert decision.action in (Action.FORWARD, Action.DROP), "answered a request that expects none"
    if decision.action is Action.REJOIN:
        assert (key, joined_on, state) == (apis.HEARTBEAT, "primary", BindingState.ACTIVE)
    if decision.action is Action.CARRY:
        assert (key, joined_on, state) == (apis.OFFSET_COMMIT, "primary", BindingState.ACTIVE)
        assert decision.source == "primary"
    if key == apis.PRODUCE and mirrored:
        assert decision.action not in SENDS, "a client wrote to a mirror's copy"
    if not blockable and key != apis.PRODUCE:
        assert decision.action is Action.FORWARD  # group-less, partition-less APIs are never stopped


@pytest.mark.parametrize(
    ("key", "state", "listener", "answered", "joined_on", "expected"),
    [
        (apis.PRODUCE, BindingState.ACTIVE, "bound broker", True, None, Action.FORWARD),
        (apis.PRODUCE, BindingState.BLOCKED, "bound broker", True, None, Action.HOLD),
        (apis.PRODUCE, BindingState.BLOCKED, "bound broker", False, None, Action.DROP),
        (apis.PRODUCE, BindingState.ACTIVE, "left broker", True, None, Action.REDIRECT),
        (apis.PRODUCE, BindingState.ACTIVE, "left broker", False, None, Action.DROP),
        (apis.FETCH, BindingState.BLOCKED, "left broker", True, None, Action.HOLD),
        (apis.HEARTBEAT, BindingState.ACTIVE, "left broker", True, None, Action.REDIRECT),
        (apis.HEARTBEAT, BindingState.ACTIVE, "left broker", True, "primary", Action.REJOIN),
        (apis.HEARTBEAT, BindingState.ACTIVE, "bound broker", True, "primary", Action.REJOIN),
        (apis.HEARTBEAT, BindingState.ACTIVE, "bound broker", True, "standby", Action.FORWARD),
        (apis.HEARTBEAT, BindingState.BLOCKED, "bound broker", True, "primary", Action.HOLD),
        (apis.OFFSET_COMMIT, BindingState.BLOCKED, "bound broker", True, "primary", Action.HOLD),
        (apis.OFFSET_COMMIT, BindingState.ACTIVE, "left broker", True, "primary", Action.CARRY),
        (apis.OFFSET_COMMIT, BindingState.ACTIVE, "bound broker", True, "primary", Action.CARRY),
        (apis.OFFSET_COMMIT, BindingState.ACTIVE, "bound broker", True, "standby", Action.FORWARD),
        (apis.OFFSET_COMMIT, BindingState.ACTIVE, "left broker", True, None, Action.REDIRECT),
        (apis.OFFSET_FETCH, BindingState.ACTIVE, "left broker", True, None, Action.FORWARD),
        (apis.OFFSET_FETCH, BindingState.BLOCKED, "left broker", True, None, Action.HOLD),
        (apis.FIND_COORDINATOR, BindingState.BLOCKED, "bootstrap", True, None, Action.FORWARD),
        (apis.METADATA, BindingState.BLOCKED, "left broker", True, None, Action.FORWARD),
    ],
)  # fmt: skip
def test_examples(
    key: int, state: BindingState, listener: str, answered: bool, joined_on: str | None, expected: Action
) -> None:
    assert decided(key, state, listener, answered, False, joined_on).action is expected


def test_produce_to_a_mirror_copy_is_refused_for_good() -> None:
    assert decided(apis.PRODUCE, BindingState.ACTIVE, "bootstrap", True, True, None).action is Action.REFUSE


def test_metadata_with_an_empty_topic_list_is_answered_here_in_any_state() -> None:
    for state, listener in itertools.product(BindingState, LISTENERS):
        decision = decide(
            apis.METADATA, Context(), resolution(state), LISTENERS[listener], empty_metadata=True
        )
        assert decision == Decision(Action.ANSWER, "standby")


def test_a_commit_from_outside_the_group_waits_for_the_connections_rejoin() -> None:
    context = Context(topics=("t",), group="g")

    def commit(state: BindingState, listener: str) -> Decision:
        return decide(apis.OFFSET_COMMIT, context, resolution(state), LISTENERS[listener], rejoining=True)

    assert commit(BindingState.ACTIVE, "bound broker") == Decision(Action.ADOPT, "standby", 7)
    assert commit(BindingState.BLOCKED, "bound broker").action is Action.HOLD
    assert commit(BindingState.ACTIVE, "left broker").action is Action.REDIRECT
    joined = decide(apis.JOIN_GROUP, context, resolution(BindingState.ACTIVE), None, rejoining=True)
    assert joined.action is Action.FORWARD  # only commits are adopted


def test_an_old_memberships_heartbeat_is_answered_quietly_while_the_connection_rejoins() -> None:
    """kafkajs heartbeats its old membership while its join on the new cluster waits. Asked to rejoin,
    it joined again once the first join ended: a second join round, 15 s at its defaults on Tansu."""
    context = Context(topics=(), group="g")

    def heartbeat(rejoining: bool) -> Action:
        return decide(
            apis.HEARTBEAT, context, resolution(BindingState.ACTIVE), LISTENERS["bound broker"],
            joined_on="primary", rejoining=rejoining,
        ).action  # fmt: skip

    assert heartbeat(rejoining=True) is Action.QUIET
    assert heartbeat(rejoining=False) is Action.REJOIN


@pytest.mark.parametrize("key", KEYS)
def test_a_shielded_cluster_is_never_contacted_for_what_it_would_answer(key: int) -> None:
    """Partition and group requests, FindCoordinator, InitProducerId and client metrics of a shielded
    cluster's identities are answered here (a retriable error; no metrics wanted), but a write while the
    shield is fresh, which is held until the routing changes (a failover's flip) or its hold time is
    over; a transaction's write, or one long after the shield, is answered at once, and one that
    expects no answer dropped; Metadata is answered here; a
    blocked identity's requests are still held; the rest (admin requests) go on as they would."""
    for state in (BindingState.ACTIVE, BindingState.BLOCKED):
        context = Context(topics=("t",), group="g")
        decision = decide(
            key, context, resolution(state), None, shielded=True, shield_holds=True, joined_on="primary"
        )
        unshielded = decide(key, context, resolution(state), None, joined_on="primary")
        if key == apis.METADATA:
            assert decision.action is Action.ANSWER
        elif state is BindingState.BLOCKED and key in apis.BLOCKABLE:
            assert decision.action is Action.HOLD
        elif key == apis.PRODUCE:
            assert decision.action is Action.HOLD
            not_held = decide(key, context, resolution(state), None, shielded=True, shield_holds=False)
            assert not_held.action is Action.SHIELD  # long shielded, or a transaction's
            unanswered = Context(topics=("t",), expects_response=False)
            dropped = decide(key, unanswered, resolution(state), None, shielded=True, shield_holds=True)
            assert dropped.action is Action.DROP
        elif key in apis.SHIELDABLE:
            contacting = unshielded.action in (Action.FORWARD, Action.CARRY, Action.ADOPT)
            assert decision.action is (Action.SHIELD if contacting else unshielded.action), key
        else:
            assert decision == unshielded


@pytest.mark.parametrize("key", KEYS)
def test_a_gateway_that_cannot_vouch_for_its_routing_holds_what_a_block_holds(key: int) -> None:
    """Unvouched (its ZooKeeper session may have ended, and a saga moved on without it), the gateway
    holds every partition, group and transaction request of every identity, and InitProducerId, as for
    a block — one without an answer is dropped — and decides the rest (Metadata, FindCoordinator, admin)
    as it would."""
    for state, answered in itertools.product((BindingState.ACTIVE, BindingState.BLOCKED), (True, False)):
        if not answered and key != apis.PRODUCE:
            continue
        context = Context(topics=("t",), group="g", expects_response=answered)
        decision = decide(key, context, resolution(state), None, joined_on="primary", unvouched=True)
        vouched = decide(key, context, resolution(state), None, joined_on="primary")
        if key in apis.BLOCKABLE or key == apis.INIT_PRODUCER_ID:
            assert decision.action is (Action.HOLD if answered else Action.DROP), key
        else:
            assert decision == vouched, key


@pytest.mark.parametrize(
    ("state", "waits", "expected"),
    [
        (BindingState.BLOCKED, True, Action.UNFOUND),
        (BindingState.ACTIVE, True, Action.FORWARD),
        (BindingState.BLOCKED, False, Action.FORWARD),  # a producer's lookup, or a classic group's
    ],
)  # fmt: skip
def test_a_blocked_consumer_protocol_groups_coordinator_is_not_found_until_the_block_ends(
    state: BindingState, waits: bool, expected: Action
) -> None:
    """librdkafka's KIP-848 member, told its group has a coordinator, sends its commit into the block until
    it gives it up to the application; told there is none, it waits for one."""
    context = Context(group="g")
    decision = decide(apis.FIND_COORDINATOR, context, resolution(state), None, coordinator_waits=waits)
    assert decision.action is expected
    if expected is Action.UNFOUND:  # the API's retriable error, as a shielded cluster's lookup gets
        assert decision.answer is not None
        request = encode_request(apis.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0}, client_id="c")
        answer = decode_response(request, decision.answer.encoded(request)[4:])
        assert answer.error_code == ErrorCode.coordinator_not_available


@pytest.mark.parametrize(
    ("key", "fields", "producer"),
    [
        (apis.FIND_COORDINATOR, {"key": "g", "key_type": 0}, False),
        (apis.FIND_COORDINATOR, {"key": "t", "key_type": 1}, True),  # a transaction's coordinator
        (apis.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout": timedelta(0)}, True),
        (apis.END_TXN, {"transactional_id": "t", "producer_id": 7, "producer_epoch": 2}, True),
        (apis.HEARTBEAT, {"group_id": "g", "generation_id": 1, "member_id": "m"}, False),
    ],
)  # fmt: skip
def test_a_connection_is_a_producers_once_it_carries_what_only_a_producer_sends(
    key: int, fields: dict[str, object], producer: bool
) -> None:
    assert apis.from_a_producer(encode_request(key, 3, fields, client_id="c")) is producer


def test_a_coordinator_lookup_told_to_wait_changes_no_other_decision() -> None:
    """``coordinator_waits`` concerns a blocked group's FindCoordinator alone: every other API, in every
    routing state and on every listener, is decided as without it."""
    for key, state, listener, answered, mirrored, joined_on in CASES:
        if key == apis.FIND_COORDINATOR and state is BindingState.BLOCKED:
            continue
        context = Context(topics=("t",), group="g", expects_response=answered)
        waiting = decide(
            key, context, resolution(state), LISTENERS[listener],
            mirrored=lambda _topic, m=mirrored: m, joined_on=joined_on, coordinator_waits=True,
        )  # fmt: skip
        assert waiting == decided(key, state, listener, answered, mirrored, joined_on)


@pytest.mark.parametrize(
    ("state", "joined_on", "owning", "expected"),
    [
        (BindingState.ACTIVE, "primary", True, Action.RELEASE),  # moved, may own partitions: let go first
        (BindingState.ACTIVE, "primary", False, Action.FENCE),  # owns none (its acknowledgement): fenced
        (BindingState.ACTIVE, "standby", True, Action.FORWARD),  # a member where it is routed
        (BindingState.ACTIVE, None, True, Action.FORWARD),
        (BindingState.BLOCKED, "primary", True, Action.HOLD),
    ],
)  # fmt: skip
def test_a_consumer_protocol_member_moved_by_a_switch_lets_its_partitions_go_before_it_is_fenced(
    state: BindingState, joined_on: str | None, owning: bool, expected: Action
) -> None:
    context = Context(topics=("t",), group="g", expects_response=True)
    found = decide(apis.CONSUMER_GROUP_HEARTBEAT, context, resolution(state), LISTENERS["bound broker"],
                   joined_on=joined_on, owning=owning)  # fmt: skip
    assert found.action is expected
