"""A Fetch as the gateway sends it on: no leader epochs, no fetch session (``workers.gateway.fetches``)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_gateway_topic_identity import encodes
from workers.gateway import apis
from workers.gateway.entities import element_type, make
from workers.gateway.fetches import NO_EPOCH, forwarded_fetch
from workers.gateway.protocol import request_schema

VERSIONS = range(7, apis.VERSION_CAPS[apis.FETCH] + 1)
"""From the first with fetch sessions."""


def fetch(
    version: int, *epochs: tuple[int, int], session: tuple[int, int] = (0, -1), forget: bool = False
) -> Any:
    """A Fetch of orders' partitions 0.. with (current, last fetched) leader epochs each, in ``session``
    (id, epoch), forgetting partition 9 if ``forget``."""
    cls = request_schema(apis.FETCH, version)
    topic_cls = element_type(cls, "topics")
    partition_cls = element_type(topic_cls, "partitions")
    parts = tuple(
        make(partition_cls, partition=i, current_leader_epoch=c, last_fetched_epoch=f, fetch_offset=40 + i)
        for i, (c, f) in enumerate(epochs)
    )
    forgotten: tuple[Any, ...] = ()
    if forget:
        forgotten_cls = element_type(cls, "forgotten_topics_data")
        forgotten = (make(forgotten_cls, topic="orders", partitions=(9,)),)
    return make(
        cls,
        topics=(make(topic_cls, topic="orders", partitions=parts),),
        session_id=session[0],
        session_epoch=session[1],
        forgotten_topics_data=forgotten,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_a_fetch_naming_a_leader_epoch_is_sent_on_naming_none(version: int) -> None:
    """librdkafka, told of no epoch, fetches with epoch 0; a partition whose leadership has moved
    fences that for good, so the gateway sends the Fetch on without one."""
    if version < 9:
        pytest.skip("leader epochs in a Fetch from v9")
    sent = forwarded_fetch(fetch(version, (0, NO_EPOCH), (NO_EPOCH, NO_EPOCH), (5, 3)))
    assert sent is not None
    read = encodes(sent)
    assert [(p.partition, p.current_leader_epoch, p.fetch_offset) for p in read.topics[0].partitions] == [
        (0, NO_EPOCH, 40),
        (1, NO_EPOCH, 41),
        (2, NO_EPOCH, 42),
    ]
    if (
        version >= 12
    ):  # kafka-python names the epoch of the last batch it read, another cluster's after a switch
        assert {p.last_fetched_epoch for p in read.topics[0].partitions} == {NO_EPOCH}
        assert forwarded_fetch(fetch(version, (NO_EPOCH, 7))) is not None


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("session", "forget"),
    [((0, 0), False), ((1234, 5), False), ((1234, 5), True)],
    ids=["new session asked", "incremental", "incremental forgetting"],
)
def test_a_fetch_goes_on_outside_any_fetch_session(
    version: int, session: tuple[int, int], forget: bool
) -> None:
    """A session lets a client leave out partitions it does not move; through the gateway such a partition
    may since live on another cluster, where only a Fetch naming it can go. So no session is let through,
    and the broker, answering none, keeps the client on full fetches."""
    sent = forwarded_fetch(
        fetch(version, (NO_EPOCH, NO_EPOCH), (NO_EPOCH, NO_EPOCH), session=session, forget=forget)
    )
    assert sent is not None
    read = encodes(sent)
    assert (read.session_id, read.session_epoch, read.forgotten_topics_data) == (0, -1, ())
    assert [(p.partition, p.fetch_offset) for p in read.topics[0].partitions] == [(0, 40), (1, 41)]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_full_sessionless_fetch_without_epochs_goes_on_untouched(version: int) -> None:
    assert forwarded_fetch(fetch(version, (NO_EPOCH, NO_EPOCH), (NO_EPOCH, NO_EPOCH))) is None
