"""The client compatibility applications (``tests/compat``): five libraries at their default settings,
run as processes of their own, and what each saw (its events file)."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from switchyard import kafka
from switchyard.config import Config
from switchyard.errors import NoSuchTopic
from switchyard.routing.store import RoutingStore
from tests.compat.app_io import DEBUG_LOG, STACKS
from tests.helpers.java_apps import java_app
from tests.helpers.links import linked
from tests.helpers.live import unique
from tests.helpers.processes import busy
from tests.helpers.traffic import topic_ids

ROOT = Path(__file__).resolve().parents[2]
NEW_PROTOCOL = ["--group-protocol", "consumer"]
LIBRARIES: dict[str, Callable[[], list[str]]] = {
    "confluent-kafka": lambda: [sys.executable, "-m", "tests.compat.confluent_app"],
    "kafka-python": lambda: [sys.executable, "-m", "tests.compat.kafka_python_app"],
    "aiokafka": lambda: [sys.executable, "-m", "tests.compat.aiokafka_app"],
    "kafkajs": lambda: ["node", str(ROOT / "tests/compat/js/app.js")],
    "java": lambda: java_app("CompatApp"),
    # the libraries that speak the consumer group protocol (KIP-848), speaking it
    "confluent-kafka/consumer": lambda: [sys.executable, "-m", "tests.compat.confluent_app", *NEW_PROTOCOL],
    "java/consumer": lambda: [*java_app("CompatApp"), *NEW_PROTOCOL],
}
"""How each library's application is started (the Java one compiled on first use)."""
IDEMPOTENT = frozenset({"java", "java/consumer"})
"""The libraries whose producer is idempotent at its defaults (the Java client's, since 3.0). The others
send a request again when a connection's loss took its answer, and a record the cluster had written is
written twice, as Kafka says of a producer without idempotence: where that loss was a struck process's
(``restarts``), the judge allows it."""
CODECS: dict[str, tuple[str, ...]] = {
    "confluent-kafka": ("gzip", "snappy", "lz4", "zstd"),  # built into librdkafka
    # snappy, lz4, zstd through the packages the dev extra adds (python-snappy, lz4, zstandard; cramjam)
    "kafka-python": ("gzip", "snappy", "lz4", "zstd"),
    "aiokafka": ("gzip", "snappy", "lz4", "zstd"),
    "kafkajs": ("gzip", "snappy"),  # snappy through kafkajs-snappy; its lz4 and zstd codecs are native builds
    "java": ("gzip", "snappy", "lz4", "zstd"),  # snappy-java, lz4-java, zstd-jni: in the distribution
}
CODECS |= {f"{library}/consumer": CODECS[library] for library in ("confluent-kafka", "java")}
"""The compression codecs each library supports here: with ``App.start(codecs=...)`` it sends through one
producer per codec."""


@dataclass
class Seen:
    events: list[dict[str, Any]] = field(default_factory=list)
    acked: dict[int, float] = field(default_factory=dict)
    sent: dict[int, float] = field(default_factory=dict)
    """When each acknowledged record was sent, where the application says (not the Java one's)."""
    failed: list[str] = field(default_factory=list)
    produced: int | None = None
    """The sends the application attempted (said once its producer is done)."""
    unreported: int = 0
    """Records its client gave up waiting for: no report will ever come for them."""
    reports: Counter[int] = field(default_factory=Counter)
    """Each record's reports, acknowledgements and failures alike: exactly one each is the promise."""
    batches: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {"manual": [], "auto": []})
    errors: list[str] = field(default_factory=list)
    retried: list[tuple[float, str]] = field(default_factory=list)
    """(when, what) of each retriable error a poll raised, which the application went on after."""
    ended: list[str] = field(default_factory=list)
    """The application's parts (``produce``, ``manual``, ``auto``) that have ended."""
    disconnecting: list[str] = field(default_factory=list)
    """The groups whose consumer was told to disconnect (the kafkajs application says so)."""

    _received: dict[str, Counter[int]] = field(
        default_factory=lambda: {"manual": Counter(), "auto": Counter()}
    )

    def add(self, events: list[dict[str, Any]]) -> None:
        self.events += events
        for e in events:
            kind = e["k"]
            if kind == "acked":
                self.acked[e["v"]] = e["t"]
                if "s" in e:
                    self.sent[e["v"]] = e["s"]
                self.reports[e["v"]] += 1
            elif kind == "failed":
                self.failed.append(f"{e['v']}: {e['e']}")
                self.reports[e["v"]] += 1
            elif kind == "produced":
                self.produced, self.unreported = e["n"], e.get("unreported", 0)
            elif kind == "batch":
                self.batches[e["g"]].append(e)
                self._received[e["g"]].update(r[2] for r in e["recs"])
            elif kind == "error":
                self.errors.append(f"{e['g']}: {e['e']}")
            elif kind == "retried":
                self.retried.append((e["t"], f"{e['g']}: {e['e']}"))
            elif kind == "ended":
                self.ended.append(e["g"])
            elif kind == "disconnecting":
                self.disconnecting.append(e["g"])

    def received(self, group: str) -> Counter[int]:
        """How many times the group processed each record (the counter itself: read, do not change)."""
        return self._received[group]

    def first_batch(self, group: str, after: float) -> float | None:
        return next((b["t"] for b in self.batches[group] if b["t"] > after), None)


@dataclass
class App:
    library: str
    setup: str
    """What it reaches the clusters through (one gateway, a pair)."""
    app: str
    topic: str
    dir: Path
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    joined: float = 0.0
    """Seconds from its start to its first processed batch: this library's first join on this broker."""
    gateways: str = ""
    """The gateways its clients went through."""
    parts: tuple[str, ...] = ()
    """Its parts (``produce``, and ``manual`` and ``auto`` where it consumes), each saying when it ended."""
    exit_code: int | None = None
    """How the application ended once told to stop (None: it did not end in time and was killed)."""
    unstopped: str = ""
    """What it was doing when it had not ended in time (``stalled``), as it was killed."""
    spun: bool = False
    """Whether, not ended in time, it was looping (running, never waiting) as it was killed (``busy``)."""
    _seen: Seen = field(default_factory=Seen, repr=False)
    _read_to: int = field(default=0, repr=False)
    """How far ``_seen`` has read its events file."""

    @property
    def name(self) -> str:
        return f"{self.library} through {self.setup}"

    def start(
        self, bootstrap: str, *, rate: float, consume: bool = True, codecs: tuple[str, ...] = (),
        session_ms: int | None = None,
    ) -> None:  # fmt: skip
        """Run it: a producer at ``rate`` records/s (one per codec of ``codecs``, record n through the
        n % len(codecs)th; none: one without compression) and, when ``consume``, its two consumer groups
        (with ``session_ms`` as their session time-out; none: the library's default)."""
        self.dir.mkdir(parents=True)
        groups = ["--group", f"{self.app}-manual", "--auto-group", f"{self.app}-auto"] if consume else []
        argv = [
            *LIBRARIES[self.library](),
            "--bootstrap", bootstrap, "--app", self.app, "--topic", self.topic, *groups,
            "--dir", str(self.dir), "--rate", str(rate), *(["--codecs", ",".join(codecs)] if codecs else []),
            *(["--session-ms", str(session_ms)] if session_ms else []),
        ]  # fmt: skip
        self.parts = ("produce", "manual", "auto") if consume else ("produce",)
        self.started = time.time()
        log = (self.dir / "app.log").open("wb")
        self.process = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def seen(self) -> Seen:
        """What it has seen so far: the events it wrote since the last call added to those before (a
        soak's application writes millions; read whole at every look, they cost more than the look)."""
        path = self.dir / "events.jsonl"
        if path.exists():
            with path.open("rb") as events:
                events.seek(self._read_to)
                written = events.read()
            whole = written[: written.rfind(b"\n") + 1]  # a line still being written waits for the next look
            self._read_to += len(whole)
            self._seen.add([json.loads(line) for line in whole.splitlines() if line.endswith(b"}")])
        return self._seen

    def signal(self, what: str) -> None:
        (self.dir / what).touch()

    def log_tail(self, chars: int | None = 3000) -> str:
        """Its log's last ``chars`` bytes (None: all of it), read from the end: a client looping with its
        debug log on writes gigabytes."""
        with (self.dir / "app.log").open("rb") as log:
            if chars is not None:
                log.seek(max(log.seek(0, os.SEEK_END) - chars, 0))
            return log.read().decode(errors="replace")

    def stalled(self) -> str:
        """What it was doing when given up on: its log's tail and, from a running application, every
        thread's stack — a Python one's in ``STACKS`` (and where its client's debug log is), a JVM's
        (SIGQUIT) at the end of its log. Node.js has no such signal: a longer tail, kafkajs's requests when
        its debug log is on (``KAFKAJS_LOG_LEVEL=debug``)."""
        process = self.process
        if process is None or process.poll() is not None:
            return self.log_tail()
        if process.args[0] not in ("java", sys.executable):
            return self.log_tail(12000)  # Node.js: its client's debug log, when on, says more
        told = self.log_tail()
        if process.args[0] == "java":
            process.send_signal(signal.SIGQUIT)
            return f"{told}\n--- its threads: at the end of {self.dir / 'app.log'}"
        stacks = self.dir / STACKS
        process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not stacks.stat().st_size:
            time.sleep(0.1)
        time.sleep(0.2)  # the rest of the dump
        debug = self.dir / DEBUG_LOG
        return f"{told}\n--- its threads:\n{stacks.read_text()[-6000:]}" + (
            f"\n--- its client's debug log: {debug}" if debug.exists() else ""
        )

    def join_rounds(self, after: float, before: float = float("inf")) -> int:
        """The JoinGroup rounds the committing group's consumer needed for its first join in (after,
        before]: joins completed before it took up partitions. Where the library logs them
        (kafka-python); 1 where it does not."""
        if self.library != "kafka-python":
            return 1
        group = f"{self.app}-manual"
        rounds = 0
        for line in self.log_tail(None).splitlines():
            if not line.endswith(group) and f" {group} " not in line:
                continue
            try:
                at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            except ValueError:  # not a log line of its own (a traceback's)
                continue
            if not after < at <= before:
                continue
            if "Successfully joined group" in line:
                rounds += 1
            elif "Setting newly assigned partitions" in line and rounds:
                break
        return max(rounds, 1)

    def stop(self) -> None:
        self.signal("stop-producing")
        self.signal("stop")
        if self.process is not None:
            try:
                self.exit_code = self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.spun, self.unstopped = busy(self.process.pid), self.stalled()
                self.process.kill()
                self.process.wait(10)


def last_records(apps: list[App], consumers_within_s: float = 120) -> None:
    """Stop the applications' producers and wait for their last acknowledgements, then for both groups
    of each to have received every record acknowledged."""
    for a in apps:
        a.signal("stop-producing")
    wait_until("the producers' last records", apps, lambda a, s: s.produced is not None, 150)
    wait_until(
        "the consumers' last records", apps,
        lambda a, s: all(set(s.acked) <= set(s.received(g)) for g in ("manual", "auto")), consumers_within_s,
        account=behind,
    )  # fmt: skip


def behind(s: Seen) -> str:
    """Per group, how many acknowledged records it has not received and when its last batch came: which
    consumer stopped, and since when (the log's tail shows whichever client spoke last)."""
    return "; ".join(
        f"{g}: {len(set(s.acked) - set(s.received(g)))} of {len(s.acked)} not received, last batch at "
        + (time.strftime("%H:%M:%S", time.gmtime(s.batches[g][-1]["t"])) if s.batches[g] else "none")
        for g in ("manual", "auto")
    )


def longest_gap(times: list[float], since: float, until: float) -> float:
    """The longest time without an acknowledgement within [since, until], its edges included."""
    inside = sorted(t for t in times if since <= t <= until)
    return max(b - a for a, b in itertools.pairwise([since, *inside, until]))


def wait_until(
    what: str, apps: list[App], done: Any, timeout_s: float, account: Callable[[Seen], str] | None = None
) -> None:
    """Until ``done(app, seen)`` holds for every application; else the failure names the late ones, with
    ``account(seen)`` of each when given, and the first one's log."""
    deadline = time.monotonic() + timeout_s
    while True:
        late = [a for a in apps if not done(a, a.seen())]
        if not late:
            return
        for a in late:
            # Its exit is looked at after its events were read: an application that wrote its last event
            # and exited in between is read once more before being called gone.
            if a.process is not None and a.process.poll() is not None and not done(a, a.seen()):
                pytest.fail(f"{a.name}: the application exited ({a.process.returncode}):\n{a.log_tail()}")
        if time.monotonic() > deadline:
            said = "".join(f"\n{a.name}: {account(a.seen())}" for a in late) if account else ""
            pytest.fail(f"{what}: still waiting for {[a.name for a in late]}:{said}\n{late[0].stalled()}")
        time.sleep(0.5)


def unexpected_retries(s: Seen, restarts: list[tuple[float, float]] | None = None) -> list[str]:
    """The retriable errors a poll raised outside ``restarts`` (wall-clock spans of a process restarted),
    as a problem."""
    unexpected = [what for t, what in s.retried if not during(t, restarts)]
    return [f"polls raised a retriable error: {unexpected[:3]}"] if unexpected else []


def unexcused_refusal(
    batch: dict[str, Any], restarts: list[tuple[float, float]] | None, cut: list[tuple[float, float]] | None
) -> bool:
    """Whether a processed batch's commit was refused other than for a connection lost within one of
    ``restarts``, or timed out within one of ``cut`` (see :func:`during`): a broker killed stays in its
    partitions' in-sync replicas until its cluster fences it (``broker.session.timeout.ms``, 9 s, more
    when it was the active controller), and the group coordinator's log, whose writes wait for every
    in-sync replica, stands still meanwhile; a gateway frozen answers nothing. Any such outage counts, a
    broker of the cluster the application is not on too."""
    refused, t = batch["commit"], batch["t"]
    return bool(refused) and not (
        (refused in CONNECTION_LOST and during(t, restarts)) or (refused in TIMED_OUT and during(t, cut))
    )


def lapses(
    s: Seen, within: tuple[float, float], restarts: list[tuple[float, float]], cut: list[tuple[float, float]]
) -> list[str]:
    """What an application saw ``within`` a span of wall-clock time that it never should: a send that
    failed, a commit refused (``unexcused_refusal``, given the ``restarts`` and the ``cut`` spans). A
    chaos trial counts its own so, for the applications that run through every trial."""
    lo, hi = within
    failed = [e for e in s.events if e["k"] == "failed" and lo <= e["t"] < hi]
    refused = [b for b in s.batches["manual"] if lo <= b["t"] < hi and unexcused_refusal(b, restarts, cut)]
    codes = dict(Counter(b["commit"] for b in refused))
    return [
        *([f"{len(failed)} sends failed, first {failed[0]['v']}: {failed[0]['e']}"] if failed else []),
        *([f"commits refused: {codes}, first: {refused[0].get('why') or '-'}"] if refused else []),
    ]


def during(t: float, restarts: list[tuple[float, float]] | None) -> bool:
    """Whether wall-clock time ``t`` falls in one of ``restarts``, each with ``RETRY_SLACK_S`` more: the
    one gateway restarting is an outage its clients see (a connection refused), as a broker's is."""
    return any(lo <= t <= hi + RETRY_SLACK_S for lo, hi in restarts or [])


CONNECTION_LOST = frozenset({
    "_TRANSPORT", "_ALL_BROKERS_DOWN",  # librdkafka
    "KafkaConnectionError", "NodeNotReadyError",  # kafka-python, aiokafka
    "KafkaJSConnectionError", "KafkaJSConnectionClosedError",  # kafkajs
})  # fmt: skip
"""How each library names a commit refused because its connection to the coordinator went away."""
TIMED_OUT = frozenset({
    "_TIMED_OUT", "REQUEST_TIMED_OUT",  # librdkafka's own time-out; the broker's code (kafkajs's too)
    "TimeoutException",  # the Java client
    "KafkaTimeoutError", "RequestTimedOutError",  # kafka-python, aiokafka
    "KafkaJSRequestTimeoutError",  # kafkajs
})  # fmt: skip
"""How each library names a commit whose answer did not come in time."""
RETRY_SLACK_S = 10.0
"""A restart's span ends when the committing group flows again; the other group may retry a little later."""


def unaccounted_sends(s: Seen) -> list[str]:
    """Every send attempted ends in exactly one report, acknowledged or failed: a send whose report never
    came would be missing from every other count."""
    if s.produced is None:
        return ["the producer never said how many sends it attempted"]
    found = []
    if s.unreported:
        found.append(f"{s.unreported} records still without a delivery report when the producer stopped")
    reported = sum(s.reports.values())
    if reported != s.produced:
        found.append(f"{s.produced} sends attempted, {reported} reported ({len(s.failed)} failed)")
    attempted = Counter(range(s.produced))
    if s.reports != attempted:
        never, again = sorted(attempted - s.reports), sorted(s.reports - attempted)
        found.append(f"sends never reported: {never[:5]}; reported more than once or never sent: {again[:5]}")
    return found


def prepare(
    routing: RoutingStore, stack_config: Config, apps: list[App], *, partitions: int, log_start: int = 0
) -> str:
    """Each application's topic on the primary, one link copying them all, each bound to the primary.
    ``log_start``: that many records first written to each partition and deleted (as retention does), so
    that the copy's offsets differ from the source's by as many."""
    primary = stack_config.clusters["primary"].bootstrap
    kafka.create_topics(primary, [a.topic for a in apps], partitions=partitions)
    topics = [a.topic for a in apps]
    if log_start:
        keys = [(t, p) for t in topics for p in range(partitions)]
        for topic in topics:
            gone = [kafka.Record(b"gone", b"deleted", partition=p) for p in range(partitions)] * log_start
            kafka.produce(primary, topic, gone)
        admin = AdminClient({"bootstrap.servers": primary})
        for future in admin.delete_records([TopicPartition(t, p, log_start) for t, p in keys]).values():
            future.result(30)
    return linked(routing, unique("link"), [a.app for a in apps], topics, len(apps) * partitions)


def refusals(s: Seen) -> list[str]:
    """Each refused commit of the committing group, when and why, as its library said it."""
    return [
        f"{b['t']:.1f} {b['commit']} ({b.get('why') or 'no message'})"
        for b in s.batches["manual"]
        if b["commit"]
    ]


def written_twice(a: App, held: Counter[int], cut: list[tuple[float, float]] | None) -> list[int]:
    """The records ``held`` (each value's copies on the cluster) twice, but for those an outage that cut
    producers' connections accounts for (``cut``: the spans a gateway or a broker was gone): in flight
    during it — sent before its end, acknowledged after its start — from a producer without idempotence
    (``IDEMPOTENT``). A send answered only after the broker came back was as much the outage's as one
    answered within it (a chaos trial's kafkajs record, sent as a standby broker was killed and
    acknowledged when it was back, 37 s on)."""
    s = a.seen()
    return sorted(
        v for v, n in held.items()
        if n > 1 and (a.library in IDEMPOTENT or not overlaps(s.sent.get(v), s.acked.get(v, 0.0), cut))
    )  # fmt: skip


def timing(a: App, values: list[int]) -> str:
    """When ``values`` were sent, counted from the application's start, and how long each waited for its
    acknowledgement: a wait past the client's request time-out (30 s at every library's defaults) says
    the client sent them again itself."""
    s = a.seen()
    known = [(s.sent[v] - a.started, s.acked[v] - s.sent[v]) for v in values if v in s.sent and v in s.acked]
    if not known:
        return ""
    sent, waited = [at for at, _ in known], [w for _, w in known]
    return (f" ({len(values)}: sent {min(sent):.1f} to {max(sent):.1f} s after the start, acknowledged "
            f"{min(waited):.1f} to {max(waited):.1f} s after their send)")  # fmt: skip


def overlaps(sent: float | None, acked: float, spans: list[tuple[float, float]] | None) -> bool:
    """Whether a send, from ``sent`` (None: not known, as if at ``acked``) until acknowledged at ``acked``,
    was in flight during one of ``spans``, each with ``RETRY_SLACK_S`` more (as :func:`during`)."""
    start = acked if sent is None else sent
    return any(start <= hi + RETRY_SLACK_S and acked >= lo for lo, hi in spans or [])


def judge(
    a: App, final: str, other: str, restarts: list[tuple[float, float]] | None = None, *, split: bool = False,
    cut: list[tuple[float, float]] | None = None,
) -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    """The application's row of figures over its switches, and what it saw that it should not have; the
    switches end on the cluster at ``final``, ``other`` being the one it left (``split``: a partition
    migrated, its records before the end offset left on ``other``: every record on one of the two,
    once). A poll's retriable error, or a commit refused for a lost connection, is a problem unless it
    came within one of ``restarts`` (wall-clock spans of a process restarted), a commit timed out unless
    within one of ``cut`` (``unexcused_refusal``); every refused commit is counted. A record written
    twice is one only outside ``cut`` (see ``written_twice``)."""
    s = a.seen()
    manual, auto = s.received("manual"), s.received("auto")
    refused = Counter(b["commit"] for b in s.batches["manual"] if b["commit"])
    unexpected = Counter(b["commit"] for b in s.batches["manual"] if unexcused_refusal(b, restarts, cut))
    on_final = Counter(v for v in topic_ids(final, a.topic))
    try:
        on_other = Counter(topic_ids(other, a.topic))
    except NoSuchTopic:  # retired there (a topic migration's source copy)
        on_other = Counter()
    if split:
        on_final, on_other = on_final + on_other, Counter()
    leaked = set(on_other) - set(on_final)
    doubled = {v for v, n in on_final.items() if n > 1}
    unexcused = written_twice(a, on_final, cut)
    row = {
        "library": a.library,
        "through": a.setup,
        "gateways used": a.gateways,
        "codecs": ",".join(CODECS[a.library]) or "none",
        "sent": s.produced,
        "acked": len(s.acked),
        "failed sends": len(s.failed),
        "lost": len(set(s.acked) - set(manual)),
        "twice": sum(n > max(on_final[v], 1) for v, n in manual.items()),  # each copy written, once
        "written twice": len(doubled),
        "commits refused": sum(refused.values()),
        "first join s": round(a.joined, 1),
        "auto-commit twice": sum(n > 1 for n in auto.values()),
        "polls retried": len(s.retried),
        "exit": a.exit_code,
    }
    problems = [
        *unaccounted_sends(s),
        *(["sends failed: " + "; ".join(s.failed[:3])] if s.failed else []),
        *([f"{row['lost']} acknowledged records never processed"] if row["lost"] else []),
        *([f"{row['twice']} records processed twice"] if row["twice"] else []),
        *([f"commits refused: {dict(unexpected)}, first: {refusals(s)[0]}"] if unexpected else []),
        *([f"not on {'the two clusters' if split else 'the final cluster'} exactly once: "
           f"{sorted(set(s.acked) ^ set(on_final))[:5]}, written twice {unexcused[:5]}{timing(a, unexcused)}"]
          if set(on_final) != set(s.acked) or unexcused else []),
        *([f"on the cluster left only: {sorted(leaked)[:5]}"] if leaked else []),
        *([f"lost to the auto-commit group: {sorted(set(s.acked) - set(auto))[:5]}"]
          if set(s.acked) - set(auto) else []),
        *s.errors[:3],
        *unexpected_retries(s, restarts),
        *ended_badly(a),
    ]  # fmt: skip
    if problems:  # what its client said, for a failure seen once, where its log is gone with the machine
        print(f"{a.name}, its log's lines by kind:\n{log_excerpt(a)}")
    return row, problems


def ended_badly(a: App) -> list[str]:
    """How a stopped application ended, where not cleanly: its exit code, or which of its parts had not
    ended 30 s after its stop (what it was doing then printed, for a failure seen once). But for a
    kafkajs consumer group looping at its stop, its process running, never waiting: kafkajs 2.2.4
    asked to disconnect while it rebalances its fetchers (the brokers in its metadata changed) starts
    new fetchers after the stop, which loop on the stopped runner without ever waiting. Reproduced
    against Apache Kafka alone, a broker of three started again; the client's, not the trial's (said,
    not counted)."""
    if a.exit_code == 0:
        return []
    if a.exit_code is not None:
        return [f"exit code {a.exit_code}"]
    print(f"{a.name}, when given up on:\n{a.unstopped[-3000:]}")
    s = a.seen()
    left = [p for p in a.parts if p not in s.ended]
    if a.library == "kafkajs" and a.spun and left and set(left) <= set(s.disconnecting):
        print(f"{a.name}: {', '.join(left)} looped in disconnect(): kafkajs's defect (docs/reliability.md)")
        return []
    return [f"still running 30 s after its stop, not ended: {', '.join(left) or 'none (all its parts had)'}"]


def log_excerpt(a: App, kinds: int = 12, *, width: int = 400) -> str:
    """The application's log, its lines counted by kind (digits aside), the most frequent first, each with
    the first one's text; debug lines (``KAFKAJS_LOG_LEVEL=debug``: every request) left out."""
    try:
        with (a.dir / "app.log").open("rb") as log:  # its first 64 MB: a looping client's runs to gigabytes
            lines = log.read(64 << 20).decode(errors="replace").splitlines()
    except OSError as exc:
        return f"  (no log: {exc})"
    kinds_seen: dict[str, tuple[int, str]] = {}
    for line in lines:
        if re.search(r'"level":"DEBUG"|\bDEBUG\b', line):
            continue
        kind = re.sub(r"\d+", "N", line)[:200]
        count, first = kinds_seen.get(kind, (0, line))
        kinds_seen[kind] = (count + 1, first)
    top = sorted(kinds_seen.values(), key=lambda seen: -seen[0])[:kinds]
    return "\n".join(f"  {count:6d} x {first[:width]}" for count, first in top)


def table(rows: list[dict[str, Any]]) -> str:
    columns = list(rows[0])
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(str(r[c]).ljust(w) for c, w in zip(columns, widths, strict=True)) for r in rows]
    return "\n".join(lines)
