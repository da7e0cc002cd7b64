"""A Fetch as the gateway sends it on, and its answer as the client gets it: without what belongs to
neither cluster nor to the gateway's routing — leader epochs and the fetch session.

- Leader epochs go as unknown (see :mod:`workers.gateway.brokers.topic_identity` for why the gateway presents
  none, and what librdkafka and kafka-python send when told of none), in the request and in the
  answer's record batches, whose headers carry the epoch of the cluster that wrote them. A client keeps
  that epoch with its position and commits it; librdkafka commits only a position newer than its last
  commit, and compares epochs before offsets. Switched to a cluster whose epochs are lower, it would
  find every position it reads older than the one it committed on the other cluster, commit nothing
  (``_NO_OFFSET``) until its group rejoins there, and read again from its last commit: records
  processed twice. The epoch lies outside the batch's CRC, so it is rewritten in place, without
  decoding the answer.
- Fetch sessions (KIP-227) are not let through: each Fetch goes as a full fetch outside any session, so
  brokers answer with no session and clients keep sending full fetches. A session lets a client leave
  out the partitions whose position did not change, and the broker keeps reading them; through the
  gateway, such a partition may since have been migrated, or its client switched, to another cluster,
  and a Fetch that does not name it cannot be routed there: the client would wait on a cluster that
  gets no more records (kafka-python, which uses sessions, stopped at a migrated partition's end offset).
  The price is the size of the request: every partition named every time, as librdkafka always does.
"""

from __future__ import annotations

import logging
from typing import Any

from switchyard.frames.bounds import (
    BoundsError,
    after_string,
    after_tags,
    array_length,
    bytes_field,
    check_response_header,
    skipped,
)
from switchyard.frames.entities import replace_known
from switchyard.frames.protocol import with_size
from workers.gateway.framing import batches

log = logging.getLogger(__name__)
NO_EPOCH = -1
FLEXIBLE_FROM, TOPIC_IDS_FROM = 12, 13
_unwalked: set[int] = set()
"""The Fetch versions whose answer did not walk, told of once."""
NO_SESSION, SESSIONLESS_EPOCH = 0, -1
"""A session id and epoch that ask for a full fetch and no session (KIP-227's "legacy" fetch)."""


def forwarded_fetch(body: Any) -> Any | None:
    """``body`` as a full, sessionless Fetch naming no leader epochs; None when it is one already (the
    request then goes on as received, its bytes untouched)."""
    epochs = any(
        getattr(p, "current_leader_epoch", NO_EPOCH) != NO_EPOCH
        or getattr(p, "last_fetched_epoch", NO_EPOCH) != NO_EPOCH
        for t in body.topics
        for p in t.partitions
    )
    asked = (getattr(body, "session_id", NO_SESSION), getattr(body, "session_epoch", SESSIONLESS_EPOCH))
    session = asked != (NO_SESSION, SESSIONLESS_EPOCH) or bool(getattr(body, "forgotten_topics_data", ()))
    if not epochs and not session:
        return None
    unknown = {"current_leader_epoch": NO_EPOCH, "last_fetched_epoch": NO_EPOCH}
    topics = tuple(
        replace_known(t, partitions=tuple(replace_known(p, **unknown) for p in t.partitions))
        for t in body.topics
    )
    return replace_known(
        body, topics=topics, session_id=NO_SESSION, session_epoch=SESSIONLESS_EPOCH, forgotten_topics_data=()
    )


def answer_without_epochs(frame: bytes, version: int) -> bytes:
    """A Fetch answer (a frame without its size) as the client gets it: sized, each record batch's
    leader epoch unknown. An answer that does not read as a Fetch of ``version`` goes as the broker
    wrote it."""
    try:
        spans = _records(frame, version)
    except BoundsError as exc:
        if version not in _unwalked:  # once: an answer this misreads, it misreads every time
            log.warning("a Fetch v%d answer passed with its leader epochs: %s", version, exc)
            _unwalked.add(version)
        return with_size(frame)
    if not spans:
        return with_size(frame)
    out = bytearray(frame)
    for start, end in spans:
        batches.unknown_epochs(out, start, end)
    return with_size(out)  # one copy more than an answer passed as it came, not two


def _records(frame: bytes, version: int) -> list[tuple[int, int]]:
    """Where each partition's records lie in a Fetch answer (header included), by the answer's layout
    at ``version``: lengths are read and checked, nothing is decoded."""
    flexible = version >= FLEXIBLE_FROM
    at = check_response_header(frame, flexible=flexible)
    throttle_error_session = (4 if version >= 1 else 0) + (6 if version >= 7 else 0)
    at = skipped(frame, at, throttle_error_session)
    index_to_log_start = 14 + (8 if version >= 4 else 0) + (8 if version >= 5 else 0)  # index, error, ends
    spans = []
    topics, at = array_length(frame, at, flexible=flexible)
    for _ in range(topics):
        if version >= TOPIC_IDS_FROM:
            at = skipped(frame, at, 16)
        else:
            at = after_string(frame, at, flexible=flexible)
        partitions, at = array_length(frame, at, flexible=flexible)
        for _ in range(partitions):
            at = skipped(frame, at, index_to_log_start)
            if version >= 4:  # aborted transactions: producer id, first offset
                aborted, at = array_length(frame, at, flexible=flexible)
                for _ in range(aborted):
                    at = skipped(frame, at, 16)
                    at = after_tags(frame, at) if flexible else at
            at = skipped(frame, at, 4 if version >= 11 else 0)  # the preferred read replica
            start, at = bytes_field(frame, at, flexible=flexible)
            if at > start:
                spans.append((start, at))
            at = after_tags(frame, at) if flexible else at
        at = after_tags(frame, at) if flexible else at
    return spans
