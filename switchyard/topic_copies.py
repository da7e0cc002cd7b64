"""Topics created on one cluster as another has them: as many partitions, the source's own settings
(retention, cleanup policy, ...), the target's default replication factor. Used by the mirror for the
topics a link copies and by a partition migration for its target's topic."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource
from confluent_kafka.cimpl import NewTopic

from switchyard.errors import KafkaOperationError

log = logging.getLogger(__name__)


class TopicSyncError(KafkaOperationError):
    """A topic cannot be set up on the target (the message says why)."""


def create_copies(source: AdminClient, target: AdminClient, partitions: Mapping[str, int]) -> None:
    """Create each topic on ``target`` with its number of ``partitions`` and the source's settings; one
    that exists already is left as it is."""
    if not partitions:
        return
    configs = topic_configs(source, list(partitions))
    futures = target.create_topics(
        [NewTopic(name, count, config=configs.get(name, {})) for name, count in partitions.items()]
    )
    for name, future in futures.items():
        try:
            future.result(30)
        except Exception as exc:
            if "already exists" not in str(exc).lower() and "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise TopicSyncError(f"cannot create topic {name} on the target: {exc}") from exc


def topic_configs(admin: AdminClient, topics: list[str]) -> dict[str, dict[str, str]]:
    """The source topics' own settings (not defaults, not read-only), to create the copies with."""
    found: dict[str, dict[str, str]] = {}
    try:
        futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics])
        for resource, future in futures.items():
            entries: dict[str, Any] = future.result(10)
            found[resource.name] = {
                name: entry.value
                for name, entry in entries.items()
                if not entry.is_default and not entry.is_read_only and not entry.is_sensitive and entry.value
            }
    except Exception as exc:  # configs are copied where the broker allows; the data matters more
        log.warning("topic configs not copied (%s): creating with the target's defaults", exc)
    return found
