"""What this gateway's clients use — topics they produce to or fetch from, groups they work in — noted
per request at the cost of a dict write, and published for sagas to read (see :mod:`switchyard.usage`)."""

from __future__ import annotations

import time

from switchyard.identity import Identity
from switchyard.usage import CONSUME, GROUP, PRODUCE, Use
from workers.gateway.routing import apis
from workers.gateway.routing.apis import Context

RETENTION_S = 24 * 3600.0
"""Sightings older than this are forgotten."""
Key = tuple[str, str | None, str, str, str | None]


class UsageTracker:
    def __init__(self) -> None:
        self._seen: dict[Key, float] = {}

    def note(self, identity: Identity, api_key: int, context: Context) -> None:
        if identity.anonymous:
            return
        now = time.time()
        app, instance = identity.app, identity.instance
        if api_key == apis.PRODUCE:
            for topic in context.topics:
                self._seen[(app, instance, topic, PRODUCE, None)] = now
        elif api_key == apis.FETCH:
            for topic in context.topics:
                self._seen[(app, instance, topic, CONSUME, None)] = now
        elif context.group is not None and api_key in apis.GROUP_APIS:
            for topic in context.topics:  # OffsetCommit names the topics a group consumes
                self._seen[(app, instance, topic, CONSUME, context.group)] = now
            self._seen[(app, instance, "", GROUP, context.group)] = now

    def uses(self) -> list[Use]:
        """What was seen within the retention (older sightings are dropped now)."""
        cutoff = time.time() - RETENTION_S
        for key in [k for k, seen in self._seen.items() if seen < cutoff]:
            del self._seen[key]
        return [Use(*key, last_seen=seen) for key, seen in list(self._seen.items())]
