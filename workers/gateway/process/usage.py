"""What this gateway's clients use — topics they produce to or fetch from, groups they work in — noted
per request at the cost of a dict write, and published for sagas to read (see :mod:`switchyard.usage`)."""

from __future__ import annotations

import time

from switchyard.identity import Identity
from switchyard.usage import CONSUME, GROUP, PRODUCE, Use
from workers.gateway.routing import apis
from workers.gateway.routing.apis import Context

Key = tuple[str, str | None, str, str, str | None]


class UsageTracker:
    def __init__(self, retention_s: float) -> None:
        self.retention_s = retention_s
        """Sightings older than this are forgotten (``gateway.usage_window_s``)."""
        self._seen: dict[Key, float] = {}

    def recall(self, uses: list[Use]) -> None:
        """What this gateway reported before a restart: known still, unless seen again since."""
        for use in uses:
            self._seen[use.key] = max(self._seen.get(use.key, 0.0), use.last_seen)

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
        cutoff = time.time() - self.retention_s
        for key in [k for k, seen in self._seen.items() if seen < cutoff]:
            del self._seen[key]
        return [Use(*key, last_seen=seen) for key, seen in list(self._seen.items())]
