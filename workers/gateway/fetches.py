"""A Fetch as the gateway sends it on: without what belongs to neither cluster nor to the gateway's
routing — the client's leader epochs and its fetch session.

- Leader epochs go as unknown (see :mod:`workers.gateway.topic_identity` for why the gateway presents
  none, and what librdkafka and kafka-python send when told of none).
- Fetch sessions (KIP-227) are not let through: each Fetch goes as a full fetch outside any session, so
  brokers answer with no session and clients keep sending full fetches. A session lets a client leave
  out the partitions whose position did not change, and the broker keeps reading them; through the
  gateway, such a partition may since have been migrated, or its client switched, to another cluster,
  and a Fetch that does not name it cannot be routed there: the client would wait on a cluster that
  gets no more records (kafka-python, which uses sessions, stopped at a migrated partition's end offset).
  The price is the size of the request: every partition named every time, as librdkafka always does.
"""

from __future__ import annotations

from typing import Any

from workers.gateway.entities import replace_known

NO_EPOCH = -1
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
