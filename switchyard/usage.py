"""Who uses which topics and groups, as the gateways see it: the "connection reports" a topic migration
finds its applications from, and a switch finds the consumer groups of its keys from.

Each gateway notes, per identity, every topic it produces to or fetches from and every group it works
in, with when it last did, and publishes that every few seconds in an ephemeral node
``usage/<gateway id>`` (so a gateway that dies takes its report with it). Readers merge the reports.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from switchyard.errors import RoutingUnavailable
from switchyard.keys import BindingKey, KeyKind
from switchyard.routing.layout import Layout

PRODUCE, CONSUME, GROUP = "produce", "consume", "group"


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


def encode(uses: Iterable[Use]) -> bytes:
    return json.dumps({"uses": [u.row() for u in uses]}, separators=(",", ":")).encode()


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
        for row in json.loads(data or b'{"uses": []}')["uses"]:
            use = Use.of(row)
            key = (use.app, use.instance, use.topic, use.role, use.group)
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
