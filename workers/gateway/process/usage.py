"""What this gateway's clients use — topics they produce to or fetch from, groups they work in — noted
per request at the cost of a dict write, and published for sagas to read (see :mod:`switchyard.usage`)."""

from __future__ import annotations

import time
from collections.abc import Callable

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
        self.on_new: Callable[[], None] = lambda: None
        """Called (on the gateway's event loop) when a client uses something not seen before: the report
        is written soon after (:class:`~workers.gateway.process.publishing.Publisher`)."""

    def recall(self, uses: list[Use]) -> None:
        """What this gateway reported before a restart: known still, unless seen again since."""
        for use in uses:
            self._seen[use.key] = max(self._seen.get(use.key, 0.0), use.last_seen)

    def note(self, identity: Identity, api_key: int, context: Context) -> None:
        if identity.anonymous:
            return
        app, instance = identity.app, identity.instance
        keys: list[Key]
        if api_key == apis.PRODUCE:
            keys = [(app, instance, topic, PRODUCE, None) for topic in context.topics]
        elif api_key == apis.FETCH:
            keys = [(app, instance, topic, CONSUME, None) for topic in context.topics]
        elif context.group is not None and api_key in apis.GROUP_APIS:
            # OffsetCommit names the topics a group consumes
            keys = [(app, instance, topic, CONSUME, context.group) for topic in context.topics]
            keys.append((app, instance, "", GROUP, context.group))
        else:
            return
        now, seen, window = time.time(), self._seen, self.retention_s
        new = False
        for key in keys:
            before = seen.get(key)
            new = new or before is None or now - before > window  # one aged out of the report is new
            seen[key] = now
        if new:
            self.on_new()

    def uses(self) -> list[Use]:
        """What was seen within the retention (older sightings are dropped now)."""
        cutoff = time.time() - self.retention_s
        for key in [k for k, seen in self._seen.items() if seen < cutoff]:
            del self._seen[key]
        return [Use(*key, last_seen=seen) for key, seen in list(self._seen.items())]
