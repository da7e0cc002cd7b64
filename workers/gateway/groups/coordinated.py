"""A group's requests sent where its coordinator was: the broker a client keeps answers NOT_COORDINATOR
once the group's offsets partition has another leader (a broker stopped, or came back and was made the
preferred leader again). Clients look their coordinator up again in their own time — kafkajs only when
it next joins: a chaos trial's consumer was refused for 22 s after a broker kill and processed 143
records twice — so the gateway asks the cluster for the coordinator and sends the request there, and the
group's later requests on that connection straight there (see ``Session._forward``)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from workers.gateway.routing import apis


def not_coordinator(api_key: int, answer: Any) -> bool:
    """Whether a group request's answer says the broker does not coordinate the group (an OffsetCommit's
    on each partition, an OffsetFetch's for its group or, before version 2, on each partition)."""
    if api_key == apis.OFFSET_COMMIT:
        codes = [p.error_code for t in answer.topics for p in t.partitions]
    elif api_key == apis.OFFSET_FETCH:
        codes = [
            getattr(answer, "error_code", ErrorCode.none),
            *(g.error_code for g in getattr(answer, "groups", ())),
            *(p.error_code for t in getattr(answer, "topics", ()) for p in t.partitions),
        ]
    else:
        codes = [answer.error_code]
    return ErrorCode.not_coordinator in codes
