"""Chaos trials: a saga started under traffic from three client libraries at their defaults, one process
struck at a random moment of it (tests/helpers/victims.py), and each trial judged by what the
applications saw (tests/integration/test_chaos.py's sample, ``make chaos``'s run).

Every saga must end switched or compensated, clients held no longer than the struck process was gone
plus ``HELD_SLACK_S``; at the end every acknowledged record received, none processed twice by a
committing group, no send failed, no key left blocked or locked. The seed of the random choices is
printed (``SWITCHYARD_CHAOS_SEED`` replays a run).
"""

from __future__ import annotations

import itertools
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.ledger.sagas import SagaRun
from switchyard.model import BindingState
from switchyard.routing.store import RoutingStore
from switchyard.table import render
from tests.helpers import chaos_plot
from tests.helpers.chaos_sagas import (
    MOVED,
    RATE,
    Drill,
    Failover,
    Ground,
    PartitionMigration,
    Saga,
    Switches,
    TopicMigration,
)
from tests.helpers.compat import App, judge, lapses, last_records, longest_gap, prepare, wait_until
from tests.helpers.live import Live, unique, wait_for_approval
from tests.helpers.stacks import QUICK_CONSUMER
from tests.helpers.victims import Struck, Victim

LIBRARIES = ("kafkajs", "confluent-kafka/consumer", "java")
"""kafkajs produces at its defaults, not idempotent (a resend racing a held write would be written
twice); confluent-kafka's consumers speak the consumer group protocol (KIP-848); the Java client's the
classic one, its producer idempotent by default."""
KINDS = ("switch", "switch", "failover", "migrate-topic", "migrate-partition", "drill")
"""The sagas of ``make chaos``, in an order each round shuffles (tests/helpers/chaos_sagas.py): the
long-lived applications' switchovers and switchbacks, and the kinds that move something of their own."""
STRIKE_WITHIN_S = {"migrate-topic": 5.0, "drill": 12.0}
"""The strike comes at a random moment this long after the saga was started (2 s where not named):
mostly while it runs. A topic migration blocks its keys about 2 s after its start and flips 1-2 s later;
a drill's switches come 4-9 s after its start, its canary counts until about 12 s."""
PAUSE_MOST_S = 6.0
"""A frozen process is let go, and a killed stack service started again, after a random pause this long
at most (a killed gateway is started again at once: ``victims.LoneGateway``)."""
HELD_SLACK_S = 10.0
"""Clients may be held this much longer than the struck process was gone."""
MIRROR_SESSION_S = QUICK_CONSUMER["session.timeout.ms"] / 1000
"""The session time-out of the testbed's mirror copy groups."""
APPROVED_AFTER_S = 2.0
"""A trial held at an approval is approved this long after its struck process is back: requests reach
the process started again while the keys are still blocked, and must be held there too."""
ENDED_WITHIN_S = 300.0
OPERATOR_EVERY_S = 3.0


@dataclass
class Trial:
    """One saga with a process struck at a random moment of it."""

    kind: str
    outcome: str
    approval: bool = False
    """Struck (SIGKILL where it may be) while the saga waited for an approval before its flip, clients
    held."""
    struck: Struck | None = None
    approving_s: float = 0.0
    """At an approval: from the struck process back to the approval taken (the operator's time, which
    clients wait too)."""
    struck_after_s: float = 0.0
    saga_held_s: float = 0.0
    held_s: dict[str, float] = field(default_factory=dict)
    """Per application, its longest wait between two acknowledgements during the trial."""
    problems: list[str] = field(default_factory=list)
    """What the trial saw that it should not have (the run goes on, and fails at its end)."""
    saw: str = ""
    """What the saga's own applications saw, in figures (a failover's records left behind)."""

    @property
    def held_most_s(self) -> float:
        return max(self.held_s.values(), default=0.0)

    @property
    def allowed_s(self) -> float:
        return self.gone_s + self.approving_s + HELD_SLACK_S

    @property
    def gone_s(self) -> float:
        """How long the struck part was out: a killed mirror's copy stays out until its group hands the
        partitions on, once the dead member's session has ended (a sample's switchback: the process
        back in 3.1 s, its partitions copied again 8 s after the kill)."""
        if self.struck is None:
            return 0.0
        if (self.struck.victim, self.struck.signal) == ("mirror", "SIGKILL"):
            return max(self.struck.back_s, MIRROR_SESSION_S)
        return self.struck.back_s

    def row(self) -> list[object]:
        hit = self.struck
        when = "at approval" if self.approval else f"{self.struck_after_s:.2f}"
        return [
            self.kind, hit.victim if hit else "-", hit.signal if hit else "-", when,
            f"{hit.back_s:.1f}" if hit else "-", self.outcome, f"{self.saga_held_s:.2f}",
            f"{self.held_most_s:.2f}", self.saw or "-", "; ".join(self.problems)[:120] or "-",
        ]  # fmt: skip


HEADERS = [
    "saga",
    "struck",
    "signal",
    "after s",
    "gone s",
    "outcome",
    "saga held s",
    "clients held s",
    "saw",
    "problems",
]


def proves_something(trials: list[Trial]) -> None:
    """A run in which no saga switched fails: each trial may compensate (a saga that cannot go on puts
    everything back), so a run of compensations alone would pass while showing nothing of a switch
    under chaos — and a defect that made every switch compensate would pass with it."""
    switched = [t for t in trials if t.outcome in MOVED]
    assert switched, f"none of {len(trials)} sagas switched (all compensated): the run proves nothing"


def seeded() -> tuple[int, random.Random]:
    """The run's seed (``SWITCHYARD_CHAOS_SEED`` gives one), printed, and its random choices."""
    chosen = int(os.environ.get("SWITCHYARD_CHAOS_SEED") or random.randrange(1 << 32))
    print(f"\nchaos seed {chosen} (SWITCHYARD_CHAOS_SEED={chosen} replays it)")
    return chosen, random.Random(chosen)


@contextmanager
def applications(
    live: Live, routing: RoutingStore, config: Config, workdir: Path
) -> Iterator[tuple[list[App], str]]:
    """The applications, bound to the primary behind a link, producing and consuming through the
    gateway; their last records waited for, and they stopped, after."""
    assert live.gateway is not None
    apps = [
        App(library, "one gateway", unique("chaos"), unique("chaos-t"), workdir / library.replace("/", "-"))
        for library in LIBRARIES
    ]
    link = prepare(routing, config, apps, partitions=2)
    try:
        for a in apps:
            a.start(live.gateway.bootstrap, rate=RATE)
        wait_until("first records", apps, lambda a, s: len(s.acked) >= 2 * RATE and s.batches["manual"], 120)
        yield apps, link
        last_records(apps)
    finally:
        for a in apps:
            a.stop()


def run_trials(
    live: Live, routing: RoutingStore, config: Config, victims: list[Victim], workdir: Path, trials: int,
    seed: tuple[int, random.Random], at_approval: Callable[[Victim, random.Random], bool],
    results: Path, kinds: tuple[str, ...] = ("switch",),
) -> list[Trial]:  # fmt: skip
    """``trials`` sagas of ``kinds`` (``KINDS``), each with one of ``victims`` struck (each in turn, in an
    order the ``seed`` shuffles) — killed while the saga waits at an approval where ``at_approval`` says
    so — judged at the end; what each trial saw. Its trials, their picture and the figures per process
    and per saga go to ``results``."""
    number, rng = seed
    order = list(itertools.chain.from_iterable(rng.sample(victims, len(victims)) for _ in range(trials)))
    sequence = list(itertools.chain.from_iterable(rng.sample(kinds, len(kinds)) for _ in range(trials)))
    libraries = itertools.cycle(LIBRARIES)
    done: list[Trial] = []
    locked: set[str] = set()
    ground = Ground(live, routing, config, workdir)
    with applications(live, routing, config, workdir) as (apps, link):
        switches = Switches(ground, apps, link)
        drill = Drill(ground, Drill.schedule(ground, link)) if "drill" in kinds else None

        def saga(kind: str) -> Saga:
            away = "standby" if switches.on == "primary" else "primary"
            if kind == "failover":  # from the cluster the long-lived applications are not on: it is shielded
                return Failover(ground, next(libraries), away, switches.on)
            if kind == "migrate-topic":
                return TopicMigration(ground, next(libraries), switches.on, away)
            if kind == "migrate-partition":
                return PartitionMigration(ground, next(libraries), switches.on, away)
            return drill if kind == "drill" and drill is not None else switches

        last = time.time()
        for victim, kind in zip(order[:trials], sequence, strict=False):
            subject = saga(kind)
            approval = subject.approvable and at_approval(victim, rng)
            trial = one_trial(live, routing, apps, subject, victim, rng, approval, locked)
            now, struck = time.time(), [t.struck for t in [*done, trial] if t.struck is not None]
            spans, cut = [s.span for s in struck], [s.span for s in struck if cuts_connections(s)]
            # what the applications saw since the trial before, counted against this one
            trial.problems += [
                f"{a.library}: {p}" for a in apps for p in lapses(a.seen(), (last, now), spans, cut)
            ]
            last = now
            done.append(trial)
            print(render(HEADERS, [trial.row()]).splitlines()[-1], flush=True)
    print(render(HEADERS, [t.row() for t in done]))
    picture = chaos_plot.save(results, number, done)
    for by in ("victim", "kind"):
        print(render([by, "trials", "failed", "held p50 s", "held max s"], chaos_plot.summary(done, by)))
    print(f"trials and their picture: {picture.with_suffix('.json')}, {picture}")
    judge_run(live, routing, config, [a.app for a in apps], apps, done, locked)
    return done


def one_trial(
    live: Live, routing: RoutingStore, apps: list[App], subject: Saga, victim: Victim, rng: random.Random,
    approval: bool, locked: set[str],
) -> Trial:  # fmt: skip
    """``subject`` run with ``victim`` struck; the keys it locked added to ``locked``."""
    kind = subject.kind
    signal = rng.choice(victim.strikes)
    after, pause = rng.uniform(0, STRIKE_WITHIN_S.get(kind, 2.0)), rng.uniform(0, PAUSE_MOST_S)
    subject.prepare()
    since = time.time()
    saga = subject.start(approval)
    if approval:  # killed where it can be: started again, it must hold what the dead one held
        signal = "SIGKILL" if "SIGKILL" in victim.strikes else signal
        wait_for_approval(live, saga)
        struck = victim.strike(signal, pause)
        back = time.monotonic()
        time.sleep(APPROVED_AFTER_S)
        approved = live.cli("sagas", "approve", saga, "--reason", "chaos")
        assert approved.returncode == 0, approved.stdout + approved.stderr
        approving = time.monotonic() - back
    else:
        time.sleep(after)
        struck, approving = victim.strike(signal, pause), 0.0
    run = ended(live, routing, saga, since, subject)
    until = time.time()
    assert run.result is not None
    trial = Trial(
        kind, run.outcome or "", approval, struck, approving, after, subject.held_s(run),
        {a.library: longest_gap(list(a.seen().acked.values()), since, until) for a in apps},
    )  # fmt: skip
    trial.held_s.update(
        {
            f"{a.library} ({kind})": longest_gap(list(a.seen().acked.values()), since, until)
            for a in subject.apps
        }
    )
    trial.held_s.update(subject.clients_held_s(run))
    locked.update(subject.keys(run))
    if trial.outcome not in (*MOVED, "compensated", "failed"):  # a drill that failed says why (below)
        trial.problems.append(f"ended {trial.outcome}: {run.result.get('detail')}")
    if "FenceBroken" in (run.result.get("detail") or ""):  # nothing here writes around the gateway: a
        trial.problems.append(f"a write got past the block: {run.result['detail']}")  # held one let go
    if trial.held_most_s > trial.allowed_s:
        trial.problems.append(f"clients held {trial.held_most_s:.1f}s > {trial.allowed_s:.1f}s allowed")
    verdict = subject.finish(run, [struck.span], [struck.span] if cuts_connections(struck) else [])
    trial.problems += verdict.problems
    trial.saw = verdict.saw
    wait_until(
        f"traffic after {kind} with {victim.name} struck", apps,
        lambda a, s: sum(t > until for t in s.acked.values()) >= RATE, 120,
    )  # fmt: skip
    return trial


def cuts_connections(struck: Struck) -> bool:
    """Whether the struck process held clients' connections to the clusters: a gateway's, a broker's. A
    request it had sent on when it went may have been written without its answer reaching the client."""
    return "gateway" in struck.victim or "broker" in struck.victim


def ended(live: Live, routing: RoutingStore, saga: str, since: float, subject: Saga) -> SagaRun:
    """The saga's run started after ``since``, once the ledger has its end; what an operator does for it
    (``subject.operate``) done every few seconds meanwhile."""
    deadline = time.monotonic() + ENDED_WITHIN_S
    operated = time.monotonic()
    while True:
        runs = [r for r in routing.ledger.saga_runs(saga, limit=1) if r.started_at.timestamp() >= since - 1]
        if runs and runs[0].outcome is not None:
            return runs[0]
        if time.monotonic() > deadline:
            shown = live.cli("sagas", "show", saga)
            raise AssertionError(f"{saga}: no end after {ENDED_WITHIN_S:g}s\n{shown.stdout}{shown.stderr}")
        if time.monotonic() - operated > OPERATOR_EVERY_S:
            subject.operate(saga)
            operated = time.monotonic()
        time.sleep(0.5)


def judge_run(
    live: Live, routing: RoutingStore, config: Config, keys: list[str], apps: list[App], trials: list[Trial],
    locked: set[str],
) -> None:  # fmt: skip
    binding = routing.binding(BindingKey.for_app(keys[0]))
    assert binding is not None
    assert binding.state is BindingState.ACTIVE
    every = sorted(locked | set(keys))
    assert live.cli("sagas", "unlock", *every).stdout == "".join(f"{k}: not locked\n" for k in every)
    proves_something(trials)
    failed = [t for t in trials if t.problems]
    assert not failed, f"{len(failed)} of {len(trials)} trials failed: " + "; ".join(
        f"{t.kind} with {t.struck.victim if t.struck else '-'} struck: {', '.join(t.problems)}"
        for t in failed
    )
    final = config.clusters[binding.cluster].bootstrap
    other = next(c.bootstrap for name, c in config.clusters.items() if name != binding.cluster)
    gone = [t.struck.span for t in trials if t.struck is not None]
    cut = [t.struck.span for t in trials if t.struck is not None and cuts_connections(t.struck)]
    problems = {a.library: judge(a, final, other, restarts=gone, cut=cut)[1] for a in apps}
    assert not any(problems.values()), problems
