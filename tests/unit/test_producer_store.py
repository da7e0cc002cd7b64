"""What a producer route looks like in ZooKeeper: every field comes back as it went in, topic names with
any character included."""

from __future__ import annotations

from workers.gateway.producers.store import decode, encode
from workers.gateway.producers.translation import Origin, ProducerRoute, Translation


def test_a_route_comes_back_as_stored() -> None:
    issued = ProducerRoute("primary", None)
    assert decode(encode(issued)) == issued
    moved = ProducerRoute("standby", Translation(42, 3, {("orders", 0): 17, ("a.b-c_d", 11): 2**31 - 1}))
    assert decode(encode(moved)) == moved
    back = ProducerRoute("primary", Translation(43, 0, {}, Origin("standby", 42, {("orders", 0): 17})))
    assert decode(encode(back)) == back
    first_move = ProducerRoute("standby", Translation(44, 0, {}, Origin("primary", 7)))
    assert decode(encode(first_move)) == first_move
