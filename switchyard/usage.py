"""Who uses which topics and groups, as the gateways see it: the "connection reports" a topic migration
finds its applications from, and a switch finds the consumer groups of its keys from.

Each gateway notes, per identity, every topic it produces to or fetches from and every group it works
in, with when it last did, and publishes that every few seconds in a persistent node
``usage/<gateway id>``. A sighting counts for ``gateway.usage_window_s`` (days): a gateway that restarts
takes up its own report again, and one that is gone leaves its report to age out, so an application that
was idle, or whose gateway restarted, is still known to use its topics. Readers merge the reports.
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from switchyard.errors import RoutingUnavailable
from switchyard.keys import BindingKey, KeyKind
from switchyard.routing.layout import Layout

log = logging.getLogger(__name__)
PRODUCE, CONSUME, GROUP = "produce", "consume", "group"
MAX_REPORT_BYTES = 900_000
"""ZooKeeper refuses a node over 1 MiB (``jute.maxbuffer``); a report is kept below it."""


@dataclass(frozen=True)
class Use:
    app: str
    instance: str | None
    topic: str
    """Empty for a group seen without a topic (JoinGroup, Heartbeat)."""
    role: str
    """produce, consume, or group."""
    group: str | None
    last_seen: float
    """Unix time."""

    def row(self) -> list[object]:
        return [self.app, self.instance, self.topic, self.role, self.group, round(self.last_seen, 1)]

    @classmethod
    def of(cls, row: list[Any]) -> Use:
        app, instance, topic, role, group, seen = row
        return cls(str(app), instance, str(topic), str(role), group, float(seen))

    @property
    def key(self) -> tuple[str, str | None, str, str, str | None]:
        """What a sighting is of; a newer one of the same replaces it."""
        return (self.app, self.instance, self.topic, self.role, self.group)


def encode(uses: Iterable[Use]) -> bytes:
    """A gateway's report, compressed (JSON rows of ~60 bytes, which compress about ninefold). One that
    would not fit in a node keeps its newest sightings (an estate whose instances come and go by the
    thousand a day), and says so."""
    rows = sorted(uses, key=lambda u: u.last_seen, reverse=True)
    data = _packed(rows)
    kept = len(rows)
    while len(data) > MAX_REPORT_BYTES:
        kept //= 2
        data = _packed(rows[:kept])
    if kept < len(rows):
        log.warning("usage report of %d sightings: only the newest %d fit in ZooKeeper", len(rows), kept)
    return data


def _packed(rows: list[Use]) -> bytes:
    return zlib.compress(json.dumps({"uses": [u.row() for u in rows]}, separators=(",", ":")).encode())


def decode(data: bytes | None) -> list[Use]:
    """A report as ``encode`` wrote it, or as plain JSON (written by gateways before reports were
    compressed)."""
    if not data:
        return []
    text = data if data.startswith(b"{") else zlib.decompress(data)
    return [Use.of(row) for row in json.loads(text)["uses"]]


def read_usage(zk: KazooClient, layout: Layout, *, within_s: float) -> list[Use]:
    """What every gateway reports, merged (the newest sighting of each), seen within ``within_s``."""
    folder = layout.folder("usage")
    cutoff = time.time() - within_s
    merged: dict[tuple[object, ...], Use] = {}
    try:
        names = zk.get_children(folder)
    except NoNodeError:
        return []
    except KazooException as exc:
        raise RoutingUnavailable(f"ZooKeeper: cannot read {folder}: {exc!r}") from exc
    for name in names:
        try:
            data, _ = zk.get(f"{folder}/{name}")
        except NoNodeError:
            continue
        try:
            report = decode(data)
        except (ValueError, KeyError, TypeError, zlib.error) as exc:  # one bad report hides no other
            log.warning("usage report %s/%s is unreadable, skipped: %r", folder, name, exc)
            continue
        for use in report:
            key = use.key
            if use.last_seen >= cutoff and (key not in merged or merged[key].last_seen < use.last_seen):
                merged[key] = use
    return sorted(merged.values(), key=lambda u: (u.app, u.topic, u.role, u.group or ""))


def uses_of(uses: Iterable[Use], keys: Iterable[BindingKey]) -> list[Use]:
    """What the keys' identities were seen doing."""
    keys = list(keys)
    return [
        use
        for use in uses
        if any(
            use.app == key.app
            and (
                key.kind is KeyKind.APP
                or (key.kind is KeyKind.INSTANCE and use.instance == key.name)
                or (key.kind is KeyKind.GROUP and use.group == key.name)
                or (key.kind is KeyKind.TOPIC and use.topic == key.name)
            )
            for key in keys
        )
    ]


def groups_of(uses: Iterable[Use], keys: Iterable[BindingKey]) -> set[str]:
    """The consumer groups the keys' identities were seen working in."""
    return {use.group for use in uses_of(uses, keys) if use.group is not None}
