"""The ends of acknowledged writes, as a gateway notes them from Produce answers and publishes them."""

from __future__ import annotations

from types import SimpleNamespace as NS

from kio.schema.errors import ErrorCode

from switchyard.acked import decode, encode
from tests.unit.test_gateway_batches import built
from workers.gateway.producers.acked import AckedEnds


def produce(*partitions: tuple[int, bytes]) -> NS:
    return NS(
        topic_data=(NS(name="orders", partition_data=tuple(NS(index=i, records=r) for i, r in partitions)),)
    )


def answer(*partitions: tuple[int, ErrorCode, int]) -> NS:
    return NS(responses=(NS(name="orders", partition_responses=tuple(
        NS(index=i, error_code=e, base_offset=b) for i, e, b in partitions)),))  # fmt: skip


def test_the_end_is_the_base_offset_plus_the_records_written_and_only_ever_grows() -> None:
    acked = AckedEnds()
    two_batches = built(0, 0, 3) + built(1, 0, 2)  # 5 records, compressed or not: headers count them
    acked.note("primary", produce((0, two_batches), (1, built(0, 0, 1))), answer(
        (0, ErrorCode.none, 100), (1, ErrorCode.not_leader_or_follower, -1)))  # fmt: skip
    assert acked.ends == {("primary", "orders", 0): 105}
    assert acked.changed
    acked.changed = False
    acked.note("primary", produce((0, built(0, 0, 1))), answer((0, ErrorCode.none, 50)))  # an older answer
    assert acked.ends == {("primary", "orders", 0): 105}
    assert not acked.changed
    assert decode(encode(acked.ends)) == acked.ends
    assert decode(encode({("c", "t.x", 12): 7, ("c", "t.x", 3): 1})) == {
        ("c", "t.x", 12): 7,
        ("c", "t.x", 3): 1,
    }
