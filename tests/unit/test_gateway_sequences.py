"""Which of a moved producer's batches may go to its new cluster
(``workers.gateway.producers.sequences``): the clusters' answers to DescribeProducers are given here, the
rules are the module's own."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import request_schema, response_schema
from tests.helpers.batches import record_batch
from workers.gateway.producers.sequences import Key, Sequences, Unsendable, established
from workers.gateway.producers.translation import Origin, Translation
from workers.gateway.routing import apis

CLIENT_ID, CLIENT_EPOCH = 7, 2
_SCHEMA = request_schema(apis.PRODUCE, 9)
_TOPIC = element_type(_SCHEMA, "topic_data")
_PARTITION = element_type(_TOPIC, "partition_data")
_RESPONSE_TOPIC = element_type(response_schema(apis.PRODUCE, 9), "responses")
_RESPONSE_PARTITION = element_type(_RESPONSE_TOPIC, "partition_responses")


class Answering(Sequences):
    """What each cluster holds, per producer id and partition: (epoch, last sequence)."""

    def __init__(self) -> None:
        self.held: dict[tuple[str, int], dict[Key, tuple[int, int]]] = {}
        self.asked: list[str] = []

    async def _last(self, cluster: str, producer_id: int, keys: Iterable[Key]) -> dict[Key, tuple[int, int]]:
        self.asked.append(cluster)
        held = self.held.get((cluster, producer_id), {})
        return {k: held[k] for k in keys if k in held}


def produce(*batches: tuple[int, int], epoch: int = CLIENT_EPOCH) -> Any:
    """A Produce of one three-record batch per (partition, first sequence)."""
    data = tuple(
        make(_PARTITION, index=p, records=record_batch(CLIENT_ID, epoch, s, [b"x", b"y", b"z"]))
        for p, s in batches
    )
    return make(
        _SCHEMA,
        transactional_id=None,
        acks=-1,
        timeout=30_000,
        topic_data=(make(_TOPIC, name="t", partition_data=data),),
    )


def check(
    sequences: Sequences,
    translation: Translation,
    *batches: tuple[int, int],
    epoch: int = CLIENT_EPOCH,
    shielded: str | None = None,
    settling: bool = False,
) -> dict[Key, ErrorCode]:
    """The codes a request is refused with (empty: it may go); ``shielded``: a cluster that may not be
    asked, whose shield is fresh where ``settling``."""
    body = produce(*batches, epoch=epoch)
    try:
        asyncio.run(
            sequences.check(
                body,
                epoch,
                translation,
                "standby",
                lambda c: c != shielded,
                settling=lambda c: settling and c == shielded,
            )
        )
    except Unsendable as refused:
        return refused.codes
    return {}


@pytest.fixture
def sequences() -> Answering:
    answering = Answering()
    answering.held[("primary", CLIENT_ID)] = {("t", 0): (CLIENT_EPOCH, 1025), ("t", 1): (CLIENT_EPOCH, 40)}
    return answering


def moved() -> Translation:
    return Translation(4001, 0, origin=Origin("primary", CLIENT_ID))


def test_the_start_is_the_clients_next_sequence_by_the_cluster_it_left(sequences: Answering) -> None:
    translation = moved()
    # 1026..1028 failed there and wait in the client: the batch behind them may not go first
    assert check(sequences, translation, (0, 1029)) == {("t", 0): ErrorCode.not_leader_or_follower}
    assert translation.first_sequence == {("t", 0): 1026}
    assert check(sequences, translation, (0, 1026)) == {}
    assert check(sequences, translation, (0, 1023)) == {("t", 0): ErrorCode.duplicate_sequence_number}
    assert check(sequences, translation, (0, 1025)) == {("t", 0): ErrorCode.out_of_order_sequence_number}


def test_a_later_batch_goes_once_the_new_cluster_holds_the_producer(sequences: Answering) -> None:
    translation = moved()
    assert check(sequences, translation, (1, 41)) == {}
    sequences.held[("standby", 4001)] = {("t", 1): (0, 2)}  # written through another process
    assert check(sequences, translation, (1, 44)) == {}
    assert ("t", 1) in translation.established
    asked = len(sequences.asked)
    assert check(sequences, translation, (1, 47)) == {}
    assert len(sequences.asked) == asked  # known here now: not asked again


def test_nothing_goes_past_a_refused_batch_before_its_resend(sequences: Answering) -> None:
    """A request refused whole leaves a gap on each of its partitions: a later batch sent on would be
    refused by the cluster (OUT_OF_ORDER_SEQUENCE_NUMBER), and librdkafka would bump its epoch."""
    translation = moved()
    assert check(sequences, translation, (1, 41)) == {}
    translation.established.add(("t", 1))
    refused = check(sequences, translation, (0, 1029), (1, 44))  # partition 0's start is missing
    assert refused == {("t", 0): ErrorCode.not_leader_or_follower}  # partition 1 resent as well
    assert check(sequences, translation, (1, 47)) == {("t", 1): ErrorCode.not_leader_or_follower}
    assert check(sequences, translation, (0, 1026), (1, 44)) == {}  # the resends, in order
    assert check(sequences, translation, (1, 47)) == {}


def test_an_epoch_bump_starts_every_partition_at_zero(sequences: Answering) -> None:
    translation = moved()
    assert check(sequences, translation, (0, 1026)) == {}
    assert check(sequences, translation, (0, 0), epoch=CLIENT_EPOCH + 1) == {}  # not a duplicate
    assert (translation.epoch, translation.first_sequence) == (1, {("t", 0): 0})
    assert check(sequences, translation, (1, 3), epoch=CLIENT_EPOCH + 1) == {
        ("t", 1): ErrorCode.not_leader_or_follower
    }
    assert check(sequences, translation, (0, 1029)) == {("t", 0): ErrorCode.invalid_producer_epoch}


def test_without_the_old_cluster_the_first_batch_sets_the_start(sequences: Answering) -> None:
    translation = Translation(4001, 0)  # a failover's: the old cluster is not asked
    assert check(sequences, translation, (0, 1029)) == {}
    assert translation.first_sequence == {("t", 0): 1029}
    assert sequences.asked == []


def test_the_cluster_judges_the_batches_of_a_partition_it_holds_the_producer_on(sequences: Answering) -> None:
    """Past 2**30 records the start looks ahead of the batches: a duplicate answered then would lose them."""
    translation = moved()
    assert check(sequences, translation, (1, 41)) == {}
    translation.established.add(("t", 1))
    assert check(sequences, translation, (1, 41 + 2**30 + 5)) == {}


def test_only_a_batch_the_old_cluster_was_asked_about_is_a_duplicate(sequences: Answering) -> None:
    translation = Translation(4001, 0)  # a failover's: the first batch set the start, a guess
    assert check(sequences, translation, (0, 1029)) == {}
    assert check(sequences, translation, (0, 1026)) == {("t", 0): ErrorCode.out_of_order_sequence_number}


def test_after_a_bump_the_old_epochs_state_does_not_stand_for_the_new_start(sequences: Answering) -> None:
    translation = moved()
    assert check(sequences, translation, (0, 1026)) == {}
    sequences.held[("standby", 4001)] = {("t", 0): (0, 2)}  # epoch 0's batches, written
    refused = check(sequences, translation, (0, 3), epoch=CLIENT_EPOCH + 1)
    assert refused == {("t", 0): ErrorCode.not_leader_or_follower}  # sequence 0 of the new epoch first


def test_a_refused_batch_written_through_another_process_lets_those_behind_it_go(
    sequences: Answering,
) -> None:
    translation = moved()
    assert check(sequences, translation, (1, 41)) == {}
    translation.established.add(("t", 1))
    check(sequences, translation, (0, 1029), (1, 44))  # refused whole: 44 is to be resent
    assert check(sequences, translation, (1, 38)) == {}  # an older batch does not clear the mark...
    assert check(sequences, translation, (1, 47)) == {("t", 1): ErrorCode.not_leader_or_follower}
    sequences.held[("standby", 4001)] = {("t", 1): (0, 5)}  # ...44..46 written elsewhere (41 is 0) does
    assert check(sequences, translation, (1, 47)) == {}


def test_an_answer_to_a_left_epoch_establishes_nothing() -> None:
    translation = moved()
    translation.follow(CLIENT_EPOCH)
    answer = make(
        response_schema(apis.PRODUCE, 9),
        responses=(
            make(
                _RESPONSE_TOPIC,
                name="t",
                partition_responses=(make(_RESPONSE_PARTITION, index=0, error_code=ErrorCode.none),),
            ),
        ),
    )
    established(translation, CLIENT_EPOCH - 1, answer)
    assert translation.established == set()
    established(translation, CLIENT_EPOCH, answer)
    assert translation.established == {("t", 0)}


def test_no_start_is_guessed_while_the_shielded_origin_may_still_answer(sequences: Answering) -> None:
    """A failover: 1026..1028 were in flight to the primary as it was shielded, and are answered with
    the retriable error once the gateway gives up on them; 1029, sent to the new leader meanwhile,
    arrives first. Taken as the start it would be written, and 1026 refused as out of order at every
    resend (a chaos trial's Java producer, until its delivery time-out)."""
    translation = moved()
    translation.first_sequence[("t", 1)] = 41  # a partition already under way on the standby
    translation.established.add(("t", 1))
    refused = check(sequences, translation, (0, 1029), (1, 44), shielded="primary", settling=True)
    assert refused == {("t", 0): ErrorCode.not_leader_or_follower}
    assert ("t", 0) not in translation.first_sequence
    assert check(sequences, translation, (1, 47)) == {("t", 1): ErrorCode.not_leader_or_follower}  # 44 first
    assert check(sequences, translation, (0, 1026), (1, 44), shielded="primary") == {}  # resent, in order
    assert translation.first_sequence[("t", 0)] == 1026
    assert ("t", 0) in translation.guessed
    assert "primary" not in sequences.asked  # never the shielded origin
