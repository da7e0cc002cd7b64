"""Topics created on one cluster as another has them: as many partitions, the source's own settings
(retention, cleanup policy, ...), the target's default replication factor. Used by the mirror for the
topics a link copies and by a partition migration for its target's topic."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from confluent_kafka.cimpl import NewTopic

from switchyard.errors import KafkaOperationError

log = logging.getLogger(__name__)


class TopicSyncError(KafkaOperationError):
    """A topic cannot be set up on the target (the message says why)."""


def create_copies(source: AdminClient, target: AdminClient, partitions: Mapping[str, int]) -> dict[str, str]:
    """Create each topic on ``target`` with its number of ``partitions`` and the source's settings; one
    that exists already is left as it is. A topic whose settings the target refuses (one an older or newer
    version does not know) is created without the refused ones rather than not at all: its records matter
    more. Returns, per such topic, what was left out and the target's reason."""
    if not partitions:
        return {}
    configs = topic_configs(source, list(partitions))
    futures = target.create_topics(
        [NewTopic(name, count, config=configs.get(name, {})) for name, count in partitions.items()]
    )
    left_out: dict[str, str] = {}
    for name, future in futures.items():
        try:
            future.result(30)
        except KafkaException as exc:
            code = exc.args[0].code()
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            if code != KafkaError.INVALID_CONFIG or not configs.get(name):
                raise TopicSyncError(f"cannot create topic {name} on the target: {exc}") from exc
            left_out[name] = _create_without_refused(target, name, partitions[name], configs[name])
    return left_out


def _create_without_refused(target: AdminClient, name: str, count: int, settings: dict[str, str]) -> str:
    """Create the topic without the settings the target refuses, and say which they were, with the
    target's reason."""
    refused = _refused(target, name, count, settings)
    kept = {key: value for key, value in settings.items() if key not in refused}
    try:
        target.create_topics([NewTopic(name, count, config=kept)])[name].result(30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise TopicSyncError(f"cannot create topic {name} on the target: {exc}") from exc
    return "; ".join(f"{key}={settings[key]} (the target: {why})" for key, why in sorted(refused.items()))


def refused_settings(
    source: AdminClient, target: AdminClient, partitions: Mapping[str, int]
) -> dict[str, str]:
    """Per topic, the source's settings the target would refuse on its copy, with its reasons (validation
    only: nothing is created); topics the target has already are left out."""
    configs = topic_configs(source, list(partitions))
    asked = [NewTopic(name, count, config=configs.get(name, {})) for name, count in partitions.items()]
    if not asked:
        return {}
    found: dict[str, str] = {}
    for name, future in target.create_topics(asked, validate_only=True).items():
        try:
            future.result(30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.INVALID_CONFIG:
                continue  # there already, or refused for what creating it would meet anyway
            refused = _refused(target, name, partitions[name], configs.get(name, {}))
            found[name] = "; ".join(f"{k}={configs[name][k]} ({why})" for k, why in sorted(refused.items()))
    return found


def _refused(target: AdminClient, name: str, count: int, settings: dict[str, str]) -> dict[str, str]:
    """The settings the target refuses, found one by one (validation only), with its reasons."""
    refused: dict[str, str] = {}
    for key, value in settings.items():
        try:
            alone = NewTopic(name, count, config={key: value})
            target.create_topics([alone], validate_only=True)[name].result(30)
        except KafkaException as exc:
            refused[key] = exc.args[0].str()
    return refused


def topic_configs(admin: AdminClient, topics: list[str]) -> dict[str, dict[str, str]]:
    """The source topics' own settings, to create the copies with: what each topic overrides, not what
    its brokers set for every topic (copied as overrides, those would stay on the copy whatever the
    target's brokers are set to), nor read-only or sensitive ones."""
    try:
        return {topic: _own(entries) for topic, entries in _described(admin, topics).items()}
    except Exception as exc:  # configs are copied where the broker allows; the data matters more
        log.warning("topic configs not copied (%s): creating with the target's defaults", exc)
        return {}


def follow_settings(source: AdminClient, target: AdminClient, topics: list[str]) -> dict[str, str | None]:
    """Set on each copy what its source topic sets now and the copy does not (a setting changed on the
    source after the copy was made). A setting the target does not know (an older or newer version's)
    is left out, as at creation; one the source no longer sets stays on the copy, where an operator may
    have set it. Per topic, why its copy's settings could not be set (None: they are in line)."""
    outcome: dict[str, str | None] = dict.fromkeys(topics)
    if not topics:
        return outcome
    wanted, there = _described(source, topics), _described(target, topics)
    changes = {}
    for topic in topics:
        known, own = there.get(topic, {}), _own(there.get(topic, {}))
        changed = {k: v for k, v in _own(wanted.get(topic, {})).items() if k in known and own.get(k) != v}
        if changed:
            changes[topic] = changed
    if not changes:
        return outcome
    futures = target.incremental_alter_configs([
        ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sorted(changed.items())
        ])
        for topic, changed in changes.items()
    ])  # fmt: skip
    for resource, future in futures.items():
        topic = resource.name
        try:
            future.result(30)
            log.info("topic %s: its copy's settings follow the source's: %s", topic, changes[topic])
        except KafkaException as exc:
            listed = ", ".join(f"{k}={v}" for k, v in sorted(changes[topic].items()))
            outcome[topic] = f"{listed} not set on the copy (the target: {exc.args[0].str()})"
    return outcome


def _described(admin: AdminClient, topics: list[str]) -> dict[str, dict[str, Any]]:
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics])
    return {resource.name: future.result(10) for resource, future in futures.items()}


def _own(entries: Mapping[str, Any]) -> dict[str, str]:
    """The settings a topic overrides itself, that may be copied."""
    return {
        name: entry.value
        for name, entry in entries.items()
        if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        and not entry.is_read_only
        and not entry.is_sensitive
        and entry.value
    }
