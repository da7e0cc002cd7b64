"""Which source topics a link copies, and their copies on the target: same name, partitions, settings."""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource
from confluent_kafka.cimpl import NewPartitions, NewTopic

from switchyard.model import Link

log = logging.getLogger(__name__)


class TopicSyncError(Exception):
    """A copied topic cannot be set up on the target (the message says why)."""


def sync_topics(link: Link, source: AdminClient, target: AdminClient) -> list[str]:
    """The source topics the link copies; each created on the target with as many partitions."""
    wanted = {
        name: len(meta.partitions)
        for name, meta in source.list_topics(timeout=10).topics.items()
        if meta.error is None and link.copies(name)
    }
    existing = {name: len(meta.partitions) for name, meta in target.list_topics(timeout=10).topics.items()}
    missing = [name for name in wanted if name not in existing]
    if missing:
        configs = topic_configs(source, missing)
        futures = target.create_topics(
            [NewTopic(name, wanted[name], config=configs.get(name, {})) for name in missing]
        )
        for name, future in futures.items():
            try:
                future.result(30)
            except Exception as exc:
                if "already exists" not in str(exc).lower() and "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise TopicSyncError(f"cannot create topic {name} on the target: {exc}") from exc
    short = {name: count for name, count in wanted.items() if name in existing and existing[name] < count}
    if short:
        futures = target.create_partitions([NewPartitions(name, count) for name, count in short.items()])
        for name, future in futures.items():
            try:
                future.result(30)
            except Exception as exc:
                raise TopicSyncError(
                    f"topic {name} has {existing[name]} partitions on the target and {short[name]} on the "
                    f"source, and the target cannot add partitions: {exc}"
                ) from exc
    return sorted(wanted)


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
