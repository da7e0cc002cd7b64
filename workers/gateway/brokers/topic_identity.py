"""What clients see of a topic's identity: one id per topic name, and no leader epochs.

Each cluster gives a topic its own id and its own leader-epoch history. A client moved from one cluster
to the other would see its topic's id change (clients take that for a deleted and recreated topic, and
drop what they know of it) and its leader epochs go back (a client that validates its position, KIP-320,
takes that for a truncated log). So, as with the cluster id, the gateway presents its own:

- a topic's id is derived from its name alone, the same on every cluster and every gateway; ids in
  requests are mapped back to names before routing, and a name is what each cluster is asked for;
- leader epochs are reported unknown (-1), the value the protocol has for "no epoch": the two clusters'
  epochs count elections on unrelated logs, and no shift of one onto the other survives a switch and a
  switch back without state every gateway would have to share. A client that knows no epoch does not
  validate positions against one, so it never mistakes a switch for a truncation; what it gives up is
  detecting a log truncated by an unclean leader election on the cluster itself;
- and a Fetch naming a leader epoch is sent on naming none (:mod:`workers.gateway.brokers.fetches`).
  librdkafka, told of no epoch, sends a current epoch of 0 (its "unknown" for a broker that reports
  epochs), which a
  partition whose leadership ever moved fences (FENCED_LEADER_EPOCH) on every fetch, for good. kafka-python
  sends the epoch of the last batch it read as ``last_fetched_epoch`` (v12), which after a switch
  is the other cluster's: the broker would answer with a diverging epoch, and the client take its own
  position for a truncated log.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from switchyard.frames.entities import replace_known as _replace
from workers.gateway.routing import apis

_NAMESPACE = uuid.UUID("5b0e3a52-0c5d-5d1e-9a39-7a9e4b2f6c11")
NO_EPOCH = -1
ZERO = uuid.UUID(int=0)

PRESENTED_FROM = {
    apis.METADATA: 7,  # leader epochs from v7, topic ids from v10
    apis.LIST_OFFSETS: 4,
    apis.OFFSET_FETCH: 5,
    apis.CREATE_TOPICS: 7,
    apis.DELETE_TOPICS: 6,
    apis.DESCRIBE_TOPIC_PARTITIONS: 0,
}
"""The answers that carry a topic id or a leader epoch, from the version on where they do."""


def topic_id(name: str) -> uuid.UUID:
    """The id clients see for topic ``name``: the same wherever the topic lives."""
    return uuid.uuid5(_NAMESPACE, name)


def presents(api_key: int, api_version: int) -> bool:
    """Whether an answer to this request carries something this module rewrites."""
    since = PRESENTED_FROM.get(api_key)
    return since is not None and api_version >= since


def present(api_key: int, body: Any) -> Any:
    """``body`` (an answer) with each topic id replaced by the name's and each leader epoch unknown."""
    if api_key in (apis.METADATA, apis.DESCRIBE_TOPIC_PARTITIONS):
        topics = tuple(
            _replace(
                t,
                topic_id=_presented_id(t.name, getattr(t, "topic_id", None)),
                partitions=tuple(_replace(p, leader_epoch=NO_EPOCH) for p in t.partitions),
            )
            for t in body.topics
        )
        return dataclasses.replace(body, topics=topics)
    if api_key == apis.LIST_OFFSETS:
        return _per_partition(body, leader_epoch=NO_EPOCH)
    if api_key == apis.OFFSET_FETCH:
        return _per_partition(body, committed_leader_epoch=NO_EPOCH)
    if api_key == apis.CREATE_TOPICS:
        topics = tuple(_replace(t, topic_id=_presented_id(t.name, t.topic_id)) for t in body.topics)
        return dataclasses.replace(body, topics=topics)
    if api_key == apis.DELETE_TOPICS:
        results = tuple(_replace(t, topic_id=_presented_id(t.name, t.topic_id)) for t in body.responses)
        return dataclasses.replace(body, responses=results)
    return body


def ids_asked(api_key: int, body: Any) -> set[uuid.UUID]:
    """The topic ids a request names a topic by (without its name): those need mapping to names."""
    if api_key not in (apis.METADATA, apis.DELETE_TOPICS):
        return set()
    topics = getattr(body, "topics", None) or ()  # DeleteTopics before v6 names topics in topic_names
    return {t.topic_id for t in topics if not t.name and _is_id(getattr(t, "topic_id", None))}


def by_name(api_key: int, body: Any, names: Mapping[uuid.UUID, str]) -> Any:
    """``body`` (a request) naming by name each topic it named by a presented id; an id no topic has is
    left as it came, and the cluster answers it as the unknown topic id it is."""
    topics = tuple(
        _replace(t, name=names[t.topic_id], topic_id=ZERO) if not t.name and t.topic_id in names else t
        for t in body.topics or ()
    )
    return dataclasses.replace(body, topics=topics)


def names_of(topics: Iterable[str]) -> dict[uuid.UUID, str]:
    return {topic_id(name): name for name in topics}


def _presented_id(name: str | None, real: uuid.UUID | None) -> uuid.UUID | None:
    return topic_id(name) if name and _is_id(real) else real


def _is_id(value: uuid.UUID | None) -> bool:
    return value is not None and value != ZERO


def _per_partition(body: Any, **changes: int) -> Any:
    topics = tuple(
        dataclasses.replace(t, partitions=tuple(_replace(p, **changes) for p in t.partitions))
        for t in body.topics
    )
    return dataclasses.replace(body, topics=topics)
