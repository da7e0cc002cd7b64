"""Saga workflow ids and the search attributes the Temporal Web UI can filter on.

One saga per binding key at a time: the workflow id is derived from the keys alone (not from the kind
of saga), and started with the conflict policy FAIL, so a second request for the same keys is refused
naming the running saga. A saga over different keys that overlap is refused by the per-key lock.
"""

from __future__ import annotations

import hashlib

from switchyard.sagas.requests import Kind

PREFIX = "switchyard"
KEYS_ATTRIBUTE = "SwitchyardKeys"
KIND_ATTRIBUTE = "SwitchyardKind"
SOURCE_ATTRIBUTE = "SwitchyardSource"
TARGET_ATTRIBUTE = "SwitchyardTarget"
PHASE_ATTRIBUTE = "SwitchyardPhase"
KEYWORD_ATTRIBUTES = (KIND_ATTRIBUTE, SOURCE_ATTRIBUTE, TARGET_ATTRIBUTE, PHASE_ATTRIBUTE)
LIST_ATTRIBUTES = (KEYS_ATTRIBUTE,)


def saga_id(keys: list[str]) -> str:
    """``switchyard:<keys>`` for one or a few short keys; a digest stands in for long or many keys."""
    joined = ",".join(sorted(set(keys)))
    if len(joined) <= 180:
        return f"{PREFIX}:{joined}"
    return f"{PREFIX}:{len(set(keys))}-keys-{hashlib.sha256(joined.encode()).hexdigest()[:16]}"


def migration_id(topic: str) -> str:
    return f"{PREFIX}:{Kind.MIGRATION}:{topic}"


def evacuation_id(source: str) -> str:
    """One evacuation of a cluster at a time."""
    return f"{PREFIX}:{Kind.EVACUATION}:{source}"


def partition_migration_id(topic: str, partition: int) -> str:
    """One migration saga per partition at a time."""
    return f"{PREFIX}:{Kind.PARTITION_MIGRATION}:{topic}[{partition}]"


def origin_retirement_id(origin: str, topic: str) -> str:
    """One retirement of a topic from a cluster at a time: the aging check starts it at most once."""
    return f"{PREFIX}:{Kind.ORIGIN_RETIREMENT}:{origin}/{topic}"


def aging_schedule_id(task_queue: str) -> str:
    """The Temporal Schedule of the aging check (``MigrationAging``), kept by the workers of one task
    queue: one per deployment (its routing tree), however many share the namespace."""
    return f"{PREFIX}:partition-aging:{task_queue}"


def migration_link(topic: str, target: str) -> str:
    """A topic migration's link: the same for every run on the topic and target, so a rerun takes up the
    copy an earlier one made."""
    return f"migrate-{topic}-to-{target}"


def step_request_id(run_id: str, step: str) -> str:
    """The request id a step's routing change carries: the same on every retry of the step, and never
    the same in two runs of a saga (a switchback runs under the switchover's workflow id)."""
    return f"{run_id}/{step}"
