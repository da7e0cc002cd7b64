"""Which source topics a link copies, and their copies on the target: same name, partitions, settings."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata
from confluent_kafka.cimpl import NewPartitions

from switchyard.model import Link
from switchyard.topic_copies import TopicSyncError, create_copies, follow_settings

log = logging.getLogger(__name__)
LIST_S, LIST_SLICE_S = 10.0, 1.0


def sync_topics(
    link: Link, source: AdminClient, target: AdminClient, stopping: threading.Event, *, follow: bool
) -> tuple[list[str], dict[str, str | None]]:
    """The source topics the link copies, each created on the target with as many partitions, the
    settings of those copied before following the source's when ``follow``; and the notes for the link's
    status (None: none due): per topic created just now without some of its settings, which (see
    ``create_copies``), per copy whose settings could not follow, why."""
    wanted = {
        name: len(meta.partitions)
        for name, meta in listed(source, stopping).topics.items()
        if meta.error is None and link.copies(name)
    }
    existing = {name: len(meta.partitions) for name, meta in listed(target, stopping).topics.items()}
    left_out = create_copies(source, target, {n: count for n, count in wanted.items() if n not in existing})
    add_partitions(target, wanted, existing)
    notes: dict[str, str | None] = {t: f"topic {t} created without {why}" for t, why in left_out.items()}
    copied = sorted(name for name in wanted if name in existing) if follow else []
    try:
        followed = follow_settings(source, target, copied)
    except (KafkaException, TimeoutError) as exc:  # the records matter more: copying goes on
        followed = dict.fromkeys(copied, f"settings not read: {exc}")
    notes.update(
        (f"settings {t}", None if why is None else f"topic {t}: {why}") for t, why in followed.items()
    )
    return sorted(wanted), notes


def grow_copies(target: AdminClient, keys: Iterable[tuple[str, int]]) -> None:
    """Add on the target the partitions among ``keys`` (new to the copy's assignment) that it lacks. The
    copy's consumer sees a topic grow on the source within a status interval (its metadata refresh);
    taken up here, its new partitions are copied from then on, not from the next topic refresh."""
    existing = {name: len(meta.partitions) for name, meta in target.list_topics(timeout=10).topics.items()}
    add_partitions(target, partition_counts(keys), existing)


def partition_counts(keys: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Per topic, how many partitions it has at least, going by the (topic, partition) ``keys``."""
    counts: dict[str, int] = {}
    for topic, partition in keys:
        counts[topic] = max(counts.get(topic, 0), partition + 1)
    return counts


def add_partitions(target: AdminClient, wanted: dict[str, int], existing: dict[str, int]) -> None:
    """Grow each copy on the target (``existing``: its partition counts) to the count ``wanted`` says."""
    short = {name: count for name, count in wanted.items() if name in existing and existing[name] < count}
    if not short:
        return
    futures = target.create_partitions([NewPartitions(name, count) for name, count in short.items()])
    grown = []
    for name, future in futures.items():
        try:
            future.result(30)
            grown.append(f"{name} to {short[name]}")
        except (KafkaException, TimeoutError) as exc:
            if isinstance(exc, KafkaException) and exc.args[0].code() == KafkaError.INVALID_PARTITIONS:
                continue  # grown meanwhile (by another process of the link)
            raise TopicSyncError(
                f"topic {name} has {existing[name]} partitions on the target and {short[name]} on the "
                f"source, and the target cannot add partitions: {exc}"
            ) from exc
    if grown:
        log.info("copies grown as their source topics: %s", ", ".join(sorted(grown)))


def listed(admin: AdminClient, stopping: threading.Event) -> ClusterMetadata:
    """A cluster's topics, asked for up to ``LIST_S`` in growing slices (1, 2, 4 s, then what is left):
    a mirror told to stop does not wait out a cluster that is gone (it did, 10 s, holding up its
    process's exit), and a cluster slow to answer still has most of the time for one answer."""
    deadline = time.monotonic() + LIST_S
    slice_s = LIST_SLICE_S
    while True:
        try:
            return admin.list_topics(timeout=min(slice_s, max(deadline - time.monotonic(), 0.1)))
        except KafkaException:
            if stopping.is_set() or time.monotonic() >= deadline - 0.1:
                raise
        slice_s *= 2
