"""The sagas chaos trials run (tests/helpers/chaos.py), a class a kind: how each is started, what an
operator does while it runs, and how what its own applications saw is judged.

The switches move the run's long-lived applications over and back. Every other kind moves something of
its own: an application started for the trial, in each of the three libraries in turn (a failover, a
topic migration, a partition migration), or the drill's canary. Each is judged by what its design
promises. A planned move (a switch, a topic or partition migration) loses nothing and processes nothing
twice. A failover skips nothing: every acknowledged record is processed on the cluster it moved to, or
was left behind on the one it left (the copy never got it); records may be processed again
(docs/runbooks/failover.md). A drill counts its own canary's records.
"""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.ledger.sagas import SagaRun
from switchyard.model import ClusterState
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import migration_id, partition_migration_id, saga_id
from switchyard.sagas.requests import Progress
from tests.helpers.compat import (
    App,
    Seen,
    ended_badly,
    judge,
    unaccounted_sends,
    unexpected_retries,
    wait_until,
    written_twice,
)
from tests.helpers.links import linked
from tests.helpers.live import Live, progress_of, unique
from tests.helpers.migrations import seen_by_gateway
from tests.helpers.traffic import topic_ids

RATE = 10
"""Records per second per application: with its two consumer groups each, beside a gateway, a mirror, a
worker and the services, on two cores."""
PARTITIONS = 2
CONSUMED_WITHIN_S = 120.0
Spans = list[tuple[float, float]]
"""Wall-clock spans (start, end)."""
MOVED = ("switched", "migrated", "passed")
"""The outcomes of a saga that moved what it moves (the others: compensated, or a failure)."""


@dataclass
class Ground:
    """What every trial's saga works on."""

    live: Live
    routing: RoutingStore
    config: Config
    workdir: Path

    def cli(self, *args: str) -> str:
        done = self.live.cli(*args)
        assert done.returncode == 0, f"switchyard {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    def bootstrap(self, cluster: str) -> str:
        return self.config.clusters[cluster].bootstrap


@dataclass
class Verdict:
    """What a saga's own applications saw that they should not have, and in figures what they saw."""

    problems: list[str]
    saw: str = ""


class Saga(ABC):
    """One trial's saga and what it moves."""

    kind = ""
    approvable = True
    """It can wait for an approval before its flip (``--approval before-flip``)."""

    def __init__(self, ground: Ground) -> None:
        self.ground = ground

    @property
    def apps(self) -> list[App]:
        """Applications of its own, whose holds are judged as the long-lived ones' are."""
        return []

    @abstractmethod
    def keys(self, run: SagaRun | None) -> list[str]:
        """The keys it locks: none may be left locked."""

    def prepare(self) -> None:  # noqa: B027 - a hook: most kinds have nothing to do here
        """Before the trial's clock starts: its applications started."""

    @abstractmethod
    def start(self, approval: bool) -> str:
        """Start it; its id."""

    def operate(self, saga: str) -> None:  # noqa: B027 - a hook: most kinds need no operator
        """What an operator does while it runs (after any strike), asked every few seconds."""

    def held_s(self, run: SagaRun) -> float:
        """How long it held its clients, as it measured."""
        assert run.result is not None
        return float(run.result["pause_ms"]) / 1000

    def clients_held_s(self, run: SagaRun) -> dict[str, float]:
        """Clients' longest waits that its own result reports (a drill's canary)."""
        return {}

    @abstractmethod
    def finish(self, run: SagaRun, restarts: Spans, cut: Spans) -> Verdict:
        """Once it ended: its own applications' last records, what they saw that they should not have,
        and everything it made tidied away; ``restarts`` the wall-clock spans a struck process was gone,
        ``cut`` those that cut producers' connections (a gateway's, a broker's)."""


class Switches(Saga):
    """Switchovers and switchbacks, in turn, of the run's long-lived applications (judged at the run's
    end, by tests/helpers/chaos.py)."""

    def __init__(self, ground: Ground, apps: list[App], link: str) -> None:
        super().__init__(ground)
        self.long_lived, self.link, self.kind = [a.app for a in apps], link, "switchover"

    @property
    def on(self) -> str:
        """The cluster the long-lived applications are on."""
        return "primary" if self.kind == "switchover" else "standby"

    def keys(self, run: SagaRun | None) -> list[str]:
        return self.long_lived

    def start(self, approval: bool) -> str:
        keys = self.long_lived
        first = ["--link", self.link] if self.link else []  # after it, each switch finds its own link
        asked = ["--approval", "before-flip"] if approval else []
        self.ground.cli(self.kind, *keys, *first, *asked, "--reason", "chaos")
        self.link = ""
        return saga_id(keys)

    def finish(self, run: SagaRun, restarts: Spans, cut: Spans) -> Verdict:
        if run.outcome == "switched":
            self.kind = "switchback" if self.kind == "switchover" else "switchover"
        return Verdict([])


class OwnApplication(Saga):
    """A saga that moves an application of its own, started for it on ``source`` and bound there."""

    def __init__(self, ground: Ground, library: str, source: str, target: str) -> None:
        super().__init__(ground)
        self.source, self.target = source, target
        name = unique(f"chaos-{self.kind}")
        self.app = App(library, "one gateway", name, f"{name}-t", ground.workdir / name)
        self.groups = {(self.app.app, f"{self.app.app}-{g}") for g in ("manual", "auto")}

    @property
    def apps(self) -> list[App]:
        return [self.app]

    def prepare(self) -> None:
        kafka.create_topics(self.ground.bootstrap(self.source), [self.app.topic], partitions=PARTITIONS)
        self.bind()
        assert self.ground.live.gateway is not None
        self.app.start(self.ground.live.gateway.bootstrap, rate=RATE)
        wait_until(
            "first records", [self.app], lambda a, s: len(s.acked) >= 2 * RATE and s.batches["manual"], 120
        )

    def bind(self) -> None:
        routing = self.ground.routing
        epoch = routing.set_binding(
            BindingKey.for_app(self.app.app), self.source, actor="user:chaos", reason="chaos set-up"
        )
        wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=30)


class Failover(OwnApplication):
    """A forced failover (the source still answers) of an application whose topic a link copies: no
    drain, no block; the source shielded, then let go again once the trial is judged."""

    kind = "failover"

    def bind(self) -> None:
        self.link = linked(
            self.ground.routing, unique("link"), [self.app.app], [self.app.topic], PARTITIONS,
            source=self.source, target=self.target,
        )  # fmt: skip

    def keys(self, run: SagaRun | None) -> list[str]:
        return [self.app.app]

    def start(self, approval: bool) -> str:
        asked = ["--approval", "before-flip"] if approval else []
        self.ground.cli(
            "failover", self.app.app, "--from", self.source, "--link", self.link, "--force", *asked,
            "--reason", "chaos",
        )  # fmt: skip
        return saga_id([self.app.app])

    def finish(self, run: SagaRun, restarts: Spans, cut: Spans) -> Verdict:
        try:
            if run.outcome != "switched":  # nothing moved: it stays where it was, the copy going on
                return planned(self.app, self.ground, self.source, self.target, restarts, cut)
            return self.judged(restarts, cut)
        finally:
            self.app.stop()
            if self.ground.routing.cluster(self.source).state is ClusterState.SHIELDED:  # type: ignore[union-attr]
                self.ground.cli("clusters", "unshield", self.source, "--reason", "chaos: the source is well")
            self.ground.cli("links", "delete", self.link, "--force", "--reason", "chaos: the trial is over")

    def judged(self, restarts: Spans, cut: Spans) -> Verdict:
        stopped(self.app)
        there = Counter(topic_ids(self.ground.bootstrap(self.target), self.app.topic))
        behind = set(topic_ids(self.ground.bootstrap(self.source), self.app.topic)) - set(there)
        s = self.app.seen()
        owed = set(s.acked) - behind
        unread = consumed(self.app, lambda s: owed)
        self.app.stop()
        lost = set(s.acked) - set(there) - behind
        twice = written_twice(self.app, there, cut)
        again = sum(n > 1 for n in s.received("manual").values())
        return Verdict([
            *unread,
            *unaccounted_sends(s),
            *(["sends failed: " + "; ".join(s.failed[:3])] if s.failed else []),
            *([f"acknowledged, on neither cluster: {sorted(lost)[:5]}"] if lost else []),
            *([f"written twice on {self.target}: {twice[:5]}"] if twice else []),
            *s.errors[:3],
            *unexpected_retries(s, restarts),
            *ended_badly(self.app),
        ], f"{self.app.library}: {len(behind)} left behind, {again} processed again")  # fmt: skip


class TopicMigration(OwnApplication):
    """A topic migration of an application's topic, with its producer and both its groups; the source's
    copy retired once an operator approves (the harness does, as soon as the saga asks)."""

    kind = "migrate-topic"

    def prepare(self) -> None:
        super().prepare()
        seen_by_gateway(self.ground.routing, self.app.topic, {self.app.app}, self.groups, timeout_s=60)

    def keys(self, run: SagaRun | None) -> list[str]:
        return [f"{self.app.app}#{self.app.topic}", *(f"{a}##{g}" for a, g in sorted(self.groups))]

    def start(self, approval: bool) -> str:
        asked = ["--approval", "before-flip"] if approval else []
        self.ground.cli("migrate-topic", self.app.topic, "--to", self.target, *asked, "--reason", "chaos")
        return migration_id(self.app.topic)

    def operate(self, saga: str) -> None:
        progress = progress_of(self.ground.live, saga)
        if isinstance(progress, Progress) and progress.awaiting_approval:
            self.ground.cli("sagas", "approve", saga, "--reason", "chaos: nobody left on the source")

    def finish(self, run: SagaRun, restarts: Spans, cut: Spans) -> Verdict:
        final, left = (self.target, self.source) if run.outcome == "migrated" else (self.source, self.target)
        try:
            return planned(self.app, self.ground, final, left, restarts, cut)
        finally:
            self.app.stop()


class PartitionMigration(OwnApplication):
    """A smooth migration of one partition of an application's topic (no link copies it: a migration of a
    copied topic is refused): its writes go to the target from its end offset on, its records before it
    stay where they are, its readers follow."""

    kind = "migrate-partition"
    moved = 0

    def keys(self, run: SagaRun | None) -> list[str]:
        return [self.app.app]

    def start(self, approval: bool) -> str:
        asked = ["--approval", "before-flip"] if approval else []
        self.ground.cli(
            "migrate-partition", self.app.topic, str(self.moved), "--to", self.target, *asked,
            "--reason", "chaos",
        )  # fmt: skip
        return partition_migration_id(self.app.topic, self.moved)

    def finish(self, run: SagaRun, restarts: Spans, cut: Spans) -> Verdict:
        try:
            return planned(self.app, self.ground, self.target, self.source, restarts, cut, split=True)
        finally:
            self.app.stop()


def planned(
    app: App, ground: Ground, final: str, left: str, restarts: Spans, cut: Spans, *, split: bool = False,
) -> Verdict:  # fmt: skip
    """What a planned move promises its application, ended on ``final``: nothing lost, nothing twice
    (``split``: a partition migrated, its records before the end offset on ``left``)."""
    stopped(app)
    consumed(app, lambda s: set(s.acked))  # judged below: what a group never processed is lost
    app.stop()
    clusters = ground.bootstrap(final), ground.bootstrap(left)
    row, problems = judge(app, *clusters, restarts=restarts, split=split, cut=cut)
    return Verdict(problems, f"{app.library}: {row['acked']} records")


def stopped(app: App) -> None:
    """``app``'s producer stopped and its last sends reported."""
    app.signal("stop-producing")
    wait_until("the producer's last records", [app], lambda a, s: s.produced is not None, 150)


def consumed(app: App, owed: Callable[[Seen], set[int]]) -> list[str]:
    """Until both of ``app``'s groups processed the records ``owed``, for ``CONSUMED_WITHIN_S`` at most:
    what each group had not by then (the trial fails on it, the run goes on)."""
    deadline = time.monotonic() + CONSUMED_WITHIN_S
    while True:
        s = app.seen()
        unread = {g: sorted(owed(s) - set(s.received(g))) for g in ("manual", "auto")}
        if not any(unread.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    return [
        f"the {g} group never processed {len(ids)} records in {CONSUMED_WITHIN_S:g}s: {ids[:5]}"
        for g, ids in unread.items() if ids
    ]  # fmt: skip


class Drill(Saga):
    """A DR drill run now: its canary switched over and back between the clusters of ``link``, judged by
    its own count (objectives on time set out of reach: clients' holds are judged as every trial's)."""

    kind = "drill"
    approvable = False

    def __init__(self, ground: Ground, name: str) -> None:
        super().__init__(ground)
        self.name = name

    @staticmethod
    def schedule(ground: Ground, link: str) -> str:
        """A drill fired by hand only, over ``link``'s clusters; its name."""
        assert ground.live.gateway is not None
        name = unique("chaos-drill")
        ground.cli(
            "drill", "schedule", name, "--link", link, "--no-spark", "--rate", str(RATE),
            "--bootstrap", ground.live.gateway.bootstrap, "--rto", "10m", "--pause", "10m",
        )  # fmt: skip
        return name

    def keys(self, run: SagaRun | None) -> list[str]:
        setup = (run.result or {}).get("setup") if run else None
        return [setup["app"]] if setup else []

    def start(self, approval: bool) -> str:
        fired = re.search(r"running: (\S+)", self.ground.cli("drill", "run", self.name))
        assert fired is not None
        return fired[1]

    def held_s(self, run: SagaRun) -> float:
        assert run.result is not None
        return max((s.get("pause_ms", 0) for s in run.result.get("sagas", [])), default=0) / 1000

    def clients_held_s(self, run: SagaRun) -> dict[str, float]:
        canary = (run.result or {}).get("canary")
        return {"drill canary": max(canary["waits_s"], default=0.0)} if canary else {}

    def finish(self, run: SagaRun, restarts: Spans, cut: Spans) -> Verdict:
        result = run.result or {}
        canary = result.get("canary") or {}
        switches = [(s["kind"], s["outcome"]) for s in result.get("sagas", [])]
        return Verdict([
            *([f"drill {run.outcome}: {result.get('failures') or result.get('detail')}"]
              if run.outcome != "passed" else []),
            *([f"a switch ended neither switched nor compensated: {switches}"]
              if any(o not in ("switched", "compensated") for _, o in switches) else []),
            *([f"canary: {canary.get('failed')} sends failed"] if canary.get("failed") else []),
            *(f"canary partition {p['partition']}: {p['lost']} lost, {p['written_twice']} written twice"
              for p in canary.get("partitions", []) if p["lost"] or p["written_twice"]),
            *([f"canary group resumed elsewhere than its commit: {canary.get('groups')}"]
              if not all(g["resumed_at_commit"] for g in canary.get("groups", [])) else []),
        ], f"canary: {canary.get('acked', 0)} records")  # fmt: skip
