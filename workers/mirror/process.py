"""One mirror process: a copier per link, started, paused and stopped as the links in ZooKeeper say.

Links come from ZooKeeper, where they change by fenced compare-and-set like any routing state (pause,
resume, promote: ``switchyard links``). The links in the configuration are created there the first
time a mirror process starts; after that ZooKeeper is the reference, and a configuration that differs
is reported, not applied.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from switchyard.config import Config
from switchyard.errors import BindingConflict, BindingRefused
from switchyard.ledger import Ledger
from switchyard.model import Link, LinkState
from switchyard.routing.snapshot import RoutingSnapshot
from switchyard.routing.store import RoutingStore
from switchyard.routing.view import BindingView
from workers.mirror.copier import LinkCopier

log = logging.getLogger(__name__)
_GAUGES = (  # exported as switchyard_mirror_lag_records, ..._lag_seconds, ..._source_end_offset, ...
    ("switchyard.mirror.lag_records", "{record}", "lag", "source records not yet on the target"),
    ("switchyard.mirror.lag_seconds", "s", "lag_s", "seconds since the partition was last fully copied"),
    (
        "switchyard.mirror.source_end_offset", "{offset}", "source_end",
        "source high watermark, from the latest fetch",
    ),
    (
        "switchyard.mirror.mirrored_offset", "{offset}", "mirrored",
        "source position copied up to, acknowledged by the target",
    ),
)  # fmt: skip


class MirrorProcess:
    def __init__(self, config: Config, zk: KazooClient, ledger: Ledger, member: str) -> None:
        self.config = config
        self.zk = zk
        self.member = member
        self.store = RoutingStore(zk, config.zookeeper.root, ledger)
        self.view = BindingView(zk, self.store.layout, config.default_cluster)
        self.copiers: dict[str, LinkCopier] = {}
        self._lock = threading.Lock()
        meter = metrics.get_meter("switchyard.mirror")
        for name, unit, field, description in _GAUGES:
            meter.create_observable_gauge(
                name, callbacks=[self._observer(field)], unit=unit, description=description
            )
        meter.create_observable_gauge(
            "switchyard.mirror.cluster_reachable",
            callbacks=[self._observe_sources],
            description="1 if the cluster answered, recently, a link copying from it, else 0",
        )
        settings = config.mirror
        self._answer_within_s = 3 * max(settings.status_interval_s, settings.topic_refresh_s)
        """A source silent this long counts as unreachable: while copying it answers a fetch every
        status interval, while idle a topic listing every refresh."""

    def start(self) -> None:
        self.store.ensure_layout()
        self._seed_links()
        self.view.on_change(self._follow)
        self.view.start()
        self._follow(self.view.snapshot)
        log.info("mirror %s: following %d links", self.member, len(self.view.snapshot.links))

    def stop(self) -> None:
        """End every link's copy side by side (each waits for its last writes), then forget them."""
        started = time.monotonic()
        self.view.stop()
        with self._lock:
            copiers = list(self.copiers.values())
            self.copiers.clear()
        for copier in copiers:
            copier.request_stop()
        for copier in copiers:
            copier.stop()
        log.info("mirror %s: stopped in %.1fs", self.member, time.monotonic() - started)

    def _seed_links(self) -> None:
        for link_id, wanted in self.config.mirror.links.items():
            existing = self.store.link(link_id)
            if existing is None:
                try:
                    self.store.create_link(
                        link_id, wanted.source, wanted.target, include=wanted.include, exclude=wanted.exclude,
                        actor=f"mirror:{self.member}", reason="defined in the configuration",
                    )  # fmt: skip
                except (BindingConflict, BindingRefused) as exc:  # another member was first, or no cluster
                    log.warning("link %s from the configuration not created: %s", link_id, exc)
            elif (existing.source, existing.target, list(existing.include), list(existing.exclude)) != (
                wanted.source, wanted.target, wanted.include, wanted.exclude
            ):  # fmt: skip
                log.warning("link %s differs from the configuration; ZooKeeper's definition is used", link_id)

    def _follow(self, snapshot: RoutingSnapshot) -> None:
        """Start a copier for each running or paused link, tell each its link's state, stop the rest."""
        with self._lock:
            for link_id, link in snapshot.links.items():
                copier = self.copiers.get(link_id)
                if copier is not None:
                    copier.update(link)
                elif link.state is not LinkState.PROMOTED:
                    self._start(link)
            for link_id in set(self.copiers) - set(snapshot.links):
                log.info("mirror %s: link %s removed", self.member, link_id)
                self.copiers.pop(link_id).stop(forget=True)

    def _observer(self, field: str) -> Callable[[CallbackOptions], list[Observation]]:
        def observe(_options: CallbackOptions) -> list[Observation]:
            with self._lock:
                copiers = list(self.copiers.values())
            return [
                Observation(getattr(status, field), {"link": c.link.id, "topic": status.topic,
                                                     "partition": status.partition})
                for c in copiers
                for status in c.statuses()
            ]  # fmt: skip

        return observe

    def _observe_sources(self, _options: CallbackOptions) -> list[Observation]:
        """Per source cluster of a link still copying: whether any of its links heard from it lately."""
        with self._lock:
            copiers = [c for c in self.copiers.values() if not c.finished.is_set()]
        since = time.time() - self._answer_within_s
        reached: dict[str, bool] = {}
        for copier in copiers:
            answered = copier.source.answered_at
            source = copier.link.source
            reached[source] = reached.get(source, False) or (answered is not None and answered >= since)
        return [Observation(int(up), {"cluster": cluster}) for cluster, up in reached.items()]

    def _start(self, link: Link) -> None:
        copier = LinkCopier(self.config, link, self.zk, self.store.layout, self.member)
        copier.start()
        self.copiers[link.id] = copier
