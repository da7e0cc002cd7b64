"""A group's requests sent where its coordinator was: the broker a client keeps answers NOT_COORDINATOR
once the group's offsets partition has another leader (a broker stopped, or came back and was made the
preferred leader again). Clients look their coordinator up again in their own time — kafkajs only when
it next joins: a chaos trial's consumer was refused for 22 s after a broker kill and processed 143
records twice — so the gateway asks the cluster for the coordinator and sends the request there, and the
group's later requests on that connection straight there (see ``Session._forward``). A coordinator
still loading the group's offsets is asked again until it has (:func:`loading`), and one named that has
not taken the group over yet (it answers NOT_COORDINATOR too) after a pause, as long as the request may
be held."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from workers.gateway.routing import apis

OFFSETS = frozenset({apis.OFFSET_COMMIT, apis.OFFSET_FETCH})
"""The requests asked again while their coordinator loads the group's offsets."""


def not_coordinator(api_key: int, answer: Any) -> bool:
    """Whether a group request's answer says the broker does not coordinate the group (an OffsetCommit's
    on each partition, an OffsetFetch's for its group or, before version 2, on each partition)."""
    return ErrorCode.not_coordinator in _codes(api_key, answer)


def loading(api_key: int, answer: Any) -> bool:
    """Whether an OffsetCommit's or OffsetFetch's answer says the coordinator is still loading the
    group's offsets: a broker just made the leader of its offsets partition (another one killed, or it
    came back) answers so for seconds. librdkafka sends such a commit twice more within some 300 ms,
    then fails it to the application (``rd_kafka_handle_OffsetCommit``); the Java client retries until
    its time-out. The gateway asks again for the client (``Session._follower``)."""
    if api_key not in OFFSETS:
        return False
    return ErrorCode.coordinator_load_in_progress in _codes(api_key, answer)


def _codes(api_key: int, answer: Any) -> list[ErrorCode]:
    if api_key == apis.OFFSET_COMMIT:
        return [p.error_code for t in answer.topics for p in t.partitions]
    if api_key == apis.OFFSET_FETCH:
        return [
            getattr(answer, "error_code", ErrorCode.none),
            *(g.error_code for g in getattr(answer, "groups", ())),
            *(p.error_code for t in getattr(answer, "topics", ()) for p in t.partitions),
        ]
    return [answer.error_code]
