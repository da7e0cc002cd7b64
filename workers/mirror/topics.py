"""Which source topics a link copies, and their copies on the target: same name, partitions, settings."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions

from switchyard.model import Link
from switchyard.topic_copies import TopicSyncError, create_copies


def sync_topics(link: Link, source: AdminClient, target: AdminClient) -> tuple[list[str], dict[str, str]]:
    """The source topics the link copies, each created on the target with as many partitions; and per
    topic created just now without some of its settings, which (see ``create_copies``)."""
    wanted = {
        name: len(meta.partitions)
        for name, meta in source.list_topics(timeout=10).topics.items()
        if meta.error is None and link.copies(name)
    }
    existing = {name: len(meta.partitions) for name, meta in target.list_topics(timeout=10).topics.items()}
    left_out = create_copies(source, target, {n: count for n, count in wanted.items() if n not in existing})
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
    return sorted(wanted), left_out
