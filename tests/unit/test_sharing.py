"""How a switch divides its link among the applications that share it (pure logic: no gateway, no
broker): here, a Kafka Streams application's internal topics that the link does not copy."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from switchyard.keys import BindingKey
from switchyard.model import Link, LinkState
from switchyard.routing.snapshot import RoutingSnapshot
from switchyard.sharing import Unshareable, divide
from switchyard.usage import PRODUCE, Use


def _link(*include: str) -> Link:
    return Link(
        "orders-link", "primary", "standby", include, (), LinkState.RUNNING, 1, datetime.now(UTC), "t"
    )


def _writes(*topics: str) -> list[Use]:
    return [Use("counter", None, topic, PRODUCE, None, time.time()) for topic in topics]


def _divided(link: Link, on_source: list[str], uses: list[Use]) -> list[str]:
    division = divide([BindingKey.for_app("counter")], link, [t for t in on_source if link.copies(t)],
                      snapshot=RoutingSnapshot(epoch=1), default_cluster="primary", uses=uses)  # fmt: skip
    return division.moving


def test_a_streams_applications_changelog_the_link_does_not_copy_is_refused_naming_it() -> None:
    """Switched, the application would restore its counts on the standby from no changelog."""
    on_source = ["orders", "counts", "counter-store-changelog", "counter-by-key-repartition"]
    uses = _writes("counts", "counter-store-changelog", "counter-by-key-repartition")
    with pytest.raises(
        Unshareable, match="counter-by-key-repartition, counter-store-changelog, Kafka Streams'"
    ):
        _divided(_link("orders", "counts"), on_source, uses)
    assert _divided(_link("orders", "counts", "counter-.*"), on_source, uses) == [
        "counter-by-key-repartition", "counter-store-changelog", "counts"
    ]  # fmt: skip


def test_an_applications_own_topic_off_the_link_is_no_reason_to_refuse() -> None:
    """Only Streams' internal topics are judged so: a plain topic may well be copied by another link."""
    assert _divided(_link("counts"), ["counts", "audit"], _writes("counts", "audit")) == ["counts"]


def test_keys_seen_using_only_topics_the_source_no_longer_holds_move_the_whole_link() -> None:
    """A drill runs under the same key each time, each run with a topic and a link of its own, deleted
    at its end: the key's uses of the runs before name topics the new link does not copy. Those the
    source no longer holds say nothing of which are the key's (the whole link moves); one it holds still
    refuses the plan, as it names a topic the link leaves behind."""
    link = _link("drill-7")
    uses = _writes("drill-5", "drill-6")

    def divided(held: set[str]) -> list[str]:
        division = divide(
            [BindingKey.for_app("counter")], link, ["drill-7"], snapshot=RoutingSnapshot(epoch=1),
            default_cluster="primary", uses=uses, held=lambda names: names & held,
        )  # fmt: skip
        return division.moving

    assert divided(held=set()) == ["drill-7"]
    with pytest.raises(Unshareable, match="drill-6, which link orders-link does not copy"):
        divided(held={"drill-6"})
