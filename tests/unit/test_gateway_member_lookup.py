"""Where a member the gateway did not see join is taken to have joined (``GroupHandling.find_member``),
from what the coordinators answer: a coordinator that cannot say leaves the member unknown, to be looked
up again, rather than counting it as a member of the cluster a link copies from."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from switchyard.frames.protocol import decode_response, parse_request
from switchyard.identity import Identity
from tests.helpers.sessions import Brokers, Gateway, exchange, raw
from workers.gateway.brokers.upstream import UpstreamError
from workers.gateway.groups.handling import RELEASE_WITHIN_S, GroupHandling
from workers.gateway.groups.members import Member, Members
from workers.gateway.routing import apis

GROUP, MEMBER = "orders", "m-1"
SHOP = Identity("shop")


class Coordinator:
    """A group's coordinator on either cluster, as the gateway's own connections reach it: no classic
    group (DescribeGroups answers Dead), and ``consumer`` for ConsumerGroupDescribe — its members, an
    error code, or an exception raised."""

    def __init__(self, consumer: set[str] | ErrorCode | Exception) -> None:
        self.consumer = consumer
        self.asked: list[int] = []
        self.cluster = "standby"

    async def ask(self, api_key: int, version: int, **_: Any) -> Any:
        self.asked.append(api_key)
        if api_key == apis.FIND_COORDINATOR:
            return SimpleNamespace(error_code=ErrorCode.none, node_id=1)
        if api_key == apis.DESCRIBE_GROUPS:
            return _groups(error_code=ErrorCode.none, group_state="Dead", members=())
        if api_key == apis.LEAVE_GROUP:
            return SimpleNamespace(error_code=ErrorCode.unknown_member_id, members=())
        if isinstance(self.consumer, Exception):
            raise self.consumer
        if isinstance(self.consumer, ErrorCode):
            return _groups(error_code=self.consumer, members=())
        return _groups(error_code=ErrorCode.none, members=tuple(_member(m) for m in self.consumer))

    def close(self) -> None:
        pass


def _groups(**described: Any) -> Any:
    return SimpleNamespace(groups=(SimpleNamespace(**described),))


def _member(member_id: str) -> Any:
    return SimpleNamespace(member_id=member_id, client_id="shop@reader")


def looked_up(
    coordinator: Coordinator, *, protocol_offered: bool = True, known: Member | None = None
) -> str | None:
    """The cluster a commit's member, sent to the standby (a link copies from the primary), is taken
    to have joined on (``known``: what the gateway had seen of it); None: left unknown."""
    member = lookup(coordinator, protocol_offered=protocol_offered, known=known)
    return None if member is None else member.cluster


def lookup(
    coordinator: Coordinator, *, protocol_offered: bool = True, known: Member | None = None
) -> Member | None:
    """What the gateway takes a commit's member, sent to the standby, for once it has looked it up."""
    return lookup_told(coordinator, protocol_offered=protocol_offered, known=known)[0]


def lookup_told(
    coordinator: Coordinator, *, protocol_offered: bool = True, known: Member | None = None
) -> tuple[Member | None, bool]:
    """``lookup``'s member, and whether the lookup told where the commit goes (False: its connection is
    closed, and the client sends it again)."""
    gateway, handling = _handling(coordinator, known, protocol_offered=protocol_offered)
    handling._copied_from = lambda snapshot, cluster, topics: "primary"  # type: ignore[method-assign]
    commit = SimpleNamespace(
        api_key=apis.OFFSET_COMMIT, api_version=9, body=SimpleNamespace(group_id=GROUP, member_id=MEMBER)
    )
    told = asyncio.run(handling.find_member(commit, None, "standby", ("orders-t",), SHOP))  # type: ignore[arg-type]
    return gateway.members.get(GROUP, MEMBER), told


@pytest.mark.parametrize(
    "answer",
    [UpstreamError("connection to 127.0.0.1:9092 closed by the gateway"), ErrorCode.not_coordinator],
    ids=["closed-by-a-flip", "not-coordinator"],
)
def test_a_coordinator_that_cannot_describe_its_consumer_group_leaves_the_member_unknown(
    answer: ErrorCode | Exception,
) -> None:
    """Nor is the commit forwarded as it is: a KIP-848 member's, sent on to a coordinator loading the
    group, was refused UNKNOWN_MEMBER_ID once it had (a chaos trial; the member had joined the other
    cluster through the other gateway process). Its connection is closed, and the client sends it
    again."""
    assert lookup_told(Coordinator(answer)) == (None, False)


def test_a_member_the_consumer_group_lists_is_one_of_its_cluster() -> None:
    assert looked_up(Coordinator({MEMBER})) == "standby"


def test_a_member_of_a_group_the_cluster_does_not_have_is_one_of_the_cluster_copied_from() -> None:
    assert looked_up(Coordinator(ErrorCode.group_id_not_found)) == "primary"
    assert looked_up(Coordinator(set())) == "primary"  # the group there has no such member


def test_where_the_gateway_offers_no_consumer_protocol_its_groups_are_not_asked_for() -> None:
    coordinator = Coordinator(UpstreamError("a broker without the API closes the connection"))
    assert looked_up(coordinator, protocol_offered=False) == "primary"
    assert apis.CONSUMER_GROUP_DESCRIBE not in coordinator.asked


SEEN_ON_THE_PRIMARY = Member("primary", 45.0, left=True, consumer=True)
"""A KIP-848 member this gateway process saw join on the primary, moved by the switch since."""


def test_a_member_looked_up_is_moved_by_a_switch_of_the_client_that_named_it() -> None:
    """One gateway process of two looked a KIP-848 member up on the primary (it was started again after
    the member joined); the other saw the member move to the standby at a switch, and back. Kept for
    no one's, the entry was never marked left: after the switch back the member's commit, sent again
    through this process, went as it was to the primary's group, which the member had not joined yet,
    and was refused UNKNOWN_MEMBER_ID (chaos run, 2026-12-05). A switch that moves the group of the
    client whose request named it marks it left, as one seen joining; a switch of another's does not."""
    found = lookup(Coordinator({MEMBER}))
    assert found is not None
    assert (found.cluster, found.identity, found.looked_up) == ("standby", SHOP, True)
    members = Members()
    members.joined(GROUP, MEMBER, found)
    # nothing is known of its joins and syncs: no commit of its client waits for it, nor looks past it
    assert not members.syncing(GROUP, "standby", SHOP)
    with_seen = Members()
    with_seen.joined(GROUP, MEMBER, found)
    with_seen.joined(
        GROUP, "m-seen", Member("standby", 45.0, identity=SHOP, synced=(3, frozenset({("t", 0)})))
    )
    assert with_seen.successor(GROUP, "standby", SHOP, {("t", 0)}) == ("m-seen", 3)
    assert members.moved(lambda identity, group: "standby" if identity == SHOP else "primary") == []
    assert members.moved(lambda identity, group: "primary") == [(GROUP, MEMBER, found)]
    moved = members.get(GROUP, MEMBER)
    assert moved is not None
    assert moved.left


def test_a_consumer_protocol_member_seen_on_the_cluster_it_left_is_found_where_it_joined_again() -> None:
    """It keeps its id: it joined the standby again through another process (the one that saw it there
    was killed), and the standby's group lists it; taken for the primary's still, its commit would go
    member-less to a group it is in (UNKNOWN_MEMBER_ID), its heartbeat be fenced."""
    assert looked_up(Coordinator({MEMBER}), known=SEEN_ON_THE_PRIMARY) == "standby"


def test_a_consumer_protocol_member_not_yet_joined_again_is_one_of_the_cluster_it_left() -> None:
    """Told to rejoin, its commits carried: as before the lookup, where the standby cannot say too."""
    assert looked_up(Coordinator(set()), known=SEEN_ON_THE_PRIMARY) == "primary"
    assert looked_up(Coordinator(UpstreamError("closed")), known=SEEN_ON_THE_PRIMARY) == "primary"


def test_a_classic_member_seen_is_not_asked_for() -> None:
    """A classic member joins again under a new id: the id a request names is the old membership's."""
    coordinator = Coordinator({MEMBER})
    assert looked_up(coordinator, known=Member("primary", 45.0, left=True)) == "primary"
    assert coordinator.asked == []


def test_a_consumer_protocol_member_this_process_had_leave_and_that_joined_again_elsewhere_is_found() -> None:
    """Seen here on the standby, and had it forget the member at a switch away; a switch back since, it
    joined the standby again through the other process, which this one never heard of. Taken for a
    member that left and had not joined again, its commit was carried from outside the group it is in,
    refused UNKNOWN_MEMBER_ID (chaos runs 10 and 11: one gateway process of two killed, its clients'
    requests going on through the other)."""
    left_here = Member("standby", 45.0, left=True, consumer=True, releasing_since=time.monotonic() - 60)
    found = lookup(Coordinator({MEMBER}), known=left_here)
    assert found is not None
    assert (found.cluster, found.left) == ("standby", False)
    assert found.releasing_since is None  # a member there: a later switch asks it to let go anew
    not_back = lookup(Coordinator(set()), known=left_here)  # not joined again: it left, as it was
    assert not_back is not None
    assert (not_back.cluster, not_back.left) == ("standby", True)


def test_a_seen_consumer_protocol_member_whose_cluster_cannot_say_is_not_told_where_it_is() -> None:
    """Its coordinator killed, the standby can say nothing of a member this process last saw on the
    primary: the lookup says so, and the entry stands, for the next request to look up again."""
    for answer, told in [(UpstreamError("refused"), False), (ErrorCode.coordinator_load_in_progress, False),
                         ({MEMBER}, True), (set(), True)]:  # fmt: skip
        gateway, handling = _handling(Coordinator(answer), SEEN_ON_THE_PRIMARY)
        heartbeat = SimpleNamespace(
            api_key=apis.CONSUMER_GROUP_HEARTBEAT, api_version=0,
            body=SimpleNamespace(group_id=GROUP, member_id=MEMBER, member_epoch=4),
        )  # fmt: skip
        assert asyncio.run(handling.find_member(heartbeat, None, "standby", (), SHOP)) is told, answer  # type: ignore[arg-type]
        expected = ("standby", False) if answer == {MEMBER} else ("primary", True)
        found = gateway.members.get(GROUP, MEMBER)
        assert (found.cluster, found.left) == expected, answer


def test_a_heartbeat_of_a_member_whose_cluster_cannot_say_is_not_fenced_its_connection_is_closed() -> None:
    """A KIP-848 member this process last saw on the cluster a switch back left, routed to the one it
    joined again through the other process, whose coordinator is killed: fenced on the entry's word
    (FENCED_MEMBER_EPOCH), librdkafka gave its partitions up and processed again what it had processed
    since its last commit (chaos run 14). Its connection is closed instead, as it is when a coordinator
    cannot be reached: the client keeps its membership, finds its coordinator again and retries. A
    cluster that says the member is not there has it fenced, as before."""
    frame = raw(
        apis.CONSUMER_GROUP_HEARTBEAT, 0, group_id=GROUP, member_id=MEMBER, member_epoch=4,
        topic_partitions=None, subscribed_topic_names=None,
    )  # fmt: skip
    gone = asyncio.run(exchange(_session_gateway(Coordinator(UpstreamError("refused"))), frame))
    assert gone == [], "answered, though the coordinator could say nothing of the member"
    (released,) = asyncio.run(exchange(_session_gateway(Coordinator(set())), frame))
    answer = decode_response(parse_request(frame), released)  # owning as before: asked to let go first
    assert (answer.error_code, answer.member_epoch, answer.assignment.topic_partitions) == (
        ErrorCode.none,
        4,
        (),
    )
    let_go = raw(
        apis.CONSUMER_GROUP_HEARTBEAT, 0, group_id=GROUP, member_id=MEMBER, member_epoch=4,
        topic_partitions=(), subscribed_topic_names=None,
    )  # fmt: skip
    (fenced,) = asyncio.run(exchange(_session_gateway(Coordinator(set())), let_go))
    assert decode_response(parse_request(let_go), fenced).error_code == ErrorCode.fenced_member_epoch


def _handling(
    coordinator: Coordinator, known: Member | None, *, protocol_offered: bool = True
) -> tuple[Any, GroupHandling]:
    """A connection's group handling, in a gateway that has seen the member as ``known`` (None: not)."""
    offered = {apis.CONSUMER_GROUP_HEARTBEAT: (0, 1)} if protocol_offered else {}
    brokers = SimpleNamespace(
        version=lambda key, cap=None: cap or 0, offered=offered, upstream=lambda *_: coordinator
    )
    gateway: Any = SimpleNamespace(members=Members(), brokers=brokers)
    if known is not None:
        gateway.members.joined(GROUP, MEMBER, known)
    later: list[Any] = []  # what the connection was given to do after its answer (``later``)
    connection = SimpleNamespace(credentials=None, later=later.append, done_later=later)
    return gateway, GroupHandling(gateway, connection)  # type: ignore[arg-type]


class _ToOneCoordinator(Brokers):
    def __init__(self, coordinator: Coordinator) -> None:
        super().__init__()
        self.coordinator = coordinator

    def version(self, _api_key: int, most: int = 0) -> int:
        return most

    def upstream(self, *_: Any) -> Any:
        return self.coordinator


def _session_gateway(coordinator: Coordinator) -> Gateway:
    """A gateway whose clients are routed to the primary (its default), and whose process last saw the
    member on the standby, which it left."""
    gateway = Gateway()
    gateway.brokers = _ToOneCoordinator(coordinator)
    gateway.members.joined(GROUP, MEMBER, Member("standby", 45.0, left=True, consumer=True))
    return gateway


def rejoin(instance: str | None = None) -> Any:
    """A classic member's JoinGroup (v5) under its old id, to the standby (a link copies from the primary)."""
    body = SimpleNamespace(group_id=GROUP, member_id=MEMBER, group_instance_id=instance)
    return SimpleNamespace(api_key=apis.JOIN_GROUP, api_version=5, correlation_id=3, body=body)


def test_a_join_under_an_id_neither_cluster_lists_goes_as_a_member_moved_from_the_source() -> None:
    """The flip had the primary forget the member — the process of a gateway of two that saw it join did
    — and kafkajs joined the standby under its old id through the other, which sent it on as it came:
    refused UNKNOWN_MEMBER_ID, its two joins in flight joined as two members, and the old membership's
    commit was refused (chaos run, 2026-12-05). Taken for a member moved from the primary, left there
    already, the join goes as a new member's (``moved``, ``rejoined_as``). A static member's (KIP-345)
    is the broker's to match by its instance id: left as it came."""
    for request, moved in [(rejoin(), True), (rejoin(instance="shop-1"), False)]:
        coordinator = Coordinator(set())
        gateway, handling = _handling(coordinator, None, protocol_offered=False)
        handling._copied_from = lambda snapshot, cluster, topics: "primary"  # type: ignore[method-assign]

        asyncio.run(_looked_up(handling, request))
        # a member the standby just named, pending there and not listed (KIP-394), is let go there
        assert (apis.LEAVE_GROUP in coordinator.asked) is moved
        found = gateway.members.get(GROUP, MEMBER)
        where = None if found is None else (found.cluster, found.left)
        assert where == (("primary", True) if moved else None), request.body
        assert handling.moved(request, None, "standby") is moved  # type: ignore[arg-type]


async def _looked_up(handling: GroupHandling, request: Any) -> None:
    """``find_member`` for ``request``, sent to the standby, and what it left its connection to do."""
    await handling.find_member(request, None, "standby", ("orders-t",), SHOP)  # type: ignore[arg-type]
    for later in handling.connection.done_later:  # type: ignore[attr-defined]
        await later


def _heartbeat(owned: tuple[Any, ...] | None) -> Any:
    body = SimpleNamespace(group_id=GROUP, member_id=MEMBER, member_epoch=4, topic_partitions=owned)
    return SimpleNamespace(api_key=apis.CONSUMER_GROUP_HEARTBEAT, api_version=0, body=body)


@pytest.mark.parametrize(
    ("owned", "owns", "asked_s_ago", "releases"),
    [
        (None, None, None, True),  # owning as before, its assignment not seen: asked to let go
        ((SimpleNamespace(partitions=(0,)),), True, None, True),
        ((), True, None, False),  # names none: its acknowledgement of the release
        ((SimpleNamespace(partitions=()),), True, None, False),
        (None, False, None, False),  # its last assignment named none: nothing to let go
        (None, True, 5.0, True),  # asked 5 s ago, and its application has not polled since
        (None, True, RELEASE_WITHIN_S + 1, False),  # asked too long ago: fenced, as before
        ((SimpleNamespace(partitions=(0,)),), False, None, True),  # names some, whatever was seen
        ((SimpleNamespace(partitions=(0,)),), True, RELEASE_WITHIN_S + 1, False),
    ],
)  # fmt: skip
def test_a_moved_consumer_protocol_member_is_asked_to_let_go_while_it_may_own_partitions(
    owned: tuple[Any, ...] | None, owns: bool | None, asked_s_ago: float | None, releases: bool
) -> None:
    since = None if asked_s_ago is None else time.monotonic() - asked_s_ago
    known = Member("standby", None, left=True, consumer=True, owns=owns, releasing_since=since)
    _, handling = _handling(Coordinator(set()), known)
    assert handling.owning(_heartbeat(owned)) is releases


def test_a_release_is_timed_from_the_first_time_a_member_is_asked() -> None:
    gateway, handling = _handling(Coordinator(set()), Member("standby", None, left=True, consumer=True))
    handling.releasing(_heartbeat(None))
    first = gateway.members.get(GROUP, MEMBER).releasing_since
    handling.releasing(_heartbeat(None))
    assert first is not None
    assert gateway.members.get(GROUP, MEMBER).releasing_since == first
