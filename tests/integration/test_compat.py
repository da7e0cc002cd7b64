"""Client compatibility: four client libraries at their default settings, through one switchover saga.

Each library runs an application of its own (``tests/compat``): a producer with acks=all and two
consumer groups, one committing synchronously after each processed batch, one on the library's default
auto-commit. All four are moved to the standby by the same switchover, and judged by what they saw:
every acknowledged record processed, none processed twice by the committing group, no send reported
failed, nothing on the old cluster after the block, and processing again within 3 s of the flip beyond
the library's own first join on this broker (measured at the start of the same run: Tansu's join delay
grows with the session time-out, which each library sets differently). The auto-commit groups'
duplicates are reported, not judged: auto-commit promises no more.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.mirror.status import read_status
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from tests.helpers.live import Live, unique
from tests.helpers.traffic import topic_ids

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = {
    "confluent-kafka": [sys.executable, "-m", "tests.compat.confluent_app"],
    "kafka-python": [sys.executable, "-m", "tests.compat.kafka_python_app"],
    "aiokafka": [sys.executable, "-m", "tests.compat.aiokafka_app"],
    "kafkajs": ["node", str(ROOT / "tests/compat/js/app.js")],
}
PARTITIONS = 3
RATE = 60
"""Records per second per application: four of them, a mirror and a gateway share two cores."""
RESUME_MARGIN_S = 3.0
ACTOR = "user:test"


@dataclass
class App:
    library: str
    app: str
    topic: str
    dir: Path
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0

    def start(self, bootstrap: str) -> None:
        self.dir.mkdir(parents=True)
        argv = [
            *LIBRARIES[self.library],
            "--bootstrap", bootstrap, "--app", self.app, "--topic", self.topic,
            "--group", f"{self.app}-manual", "--auto-group", f"{self.app}-auto",
            "--dir", str(self.dir), "--rate", str(RATE),
        ]  # fmt: skip
        self.started = time.time()
        log = (self.dir / "app.log").open("wb")
        self.process = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def seen(self) -> Seen:
        path = self.dir / "events.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return Seen([json.loads(line) for line in lines if line.endswith("}")])

    def signal(self, what: str) -> None:
        (self.dir / what).touch()

    def log_tail(self) -> str:
        return (self.dir / "app.log").read_text()[-3000:]


@dataclass
class Seen:
    events: list[dict[str, Any]]
    acked: dict[int, float] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    produced: int | None = None
    batches: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {"manual": [], "auto": []})
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for e in self.events:
            kind = e["k"]
            if kind == "acked":
                self.acked[e["v"]] = e["t"]
            elif kind == "failed":
                self.failed.append(f"{e['v']}: {e['e']}")
            elif kind == "produced":
                self.produced = e["n"]
            elif kind == "batch":
                self.batches[e["g"]].append(e)
            elif kind == "error":
                self.errors.append(f"{e['g']}: {e['e']}")

    def received(self, group: str) -> Counter[int]:
        return Counter(r[2] for b in self.batches[group] for r in b["recs"])

    def first_batch(self, group: str, after: float) -> float | None:
        return next((b["t"] for b in self.batches[group] if b["t"] > after), None)


def wait_until(what: str, apps: list[App], done: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        seen = {a.library: a.seen() for a in apps}
        late = [a for a in apps if not done(a, seen[a.library])]
        if not late:
            return
        for a in late:
            if a.process is not None and a.process.poll() is not None:
                pytest.fail(f"{a.library}: the application exited ({a.process.returncode}):\n{a.log_tail()}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: still waiting for {[a.library for a in late]}:\n{late[0].log_tail()}")
        time.sleep(0.5)


class FlipWatch:
    """When the binding of ``key`` turned active on ``cluster`` (wall clock, as the applications log)."""

    def __init__(self, routing: RoutingStore, key: BindingKey, cluster: str) -> None:
        self.at: float | None = None
        self._stop = threading.Event()

        def watch() -> None:
            while self.at is None and not self._stop.is_set():
                binding = routing.binding(key)
                if binding is not None and binding.cluster == cluster and binding.state.value == "active":
                    self.at = time.time()
                time.sleep(0.02)

        self._thread = threading.Thread(target=watch, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def test_four_client_libraries_see_nothing_of_a_switchover(
    live: Live, routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    assert live.gateway is not None
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    apps = [App(lib, unique("compat"), unique("compat-t"), tmp_path / lib) for lib in LIBRARIES]
    kafka.create_topics(primary, [a.topic for a in apps], partitions=PARTITIONS)
    link = unique("link")
    routing.create_link(link, "primary", "standby", include=[a.topic for a in apps], actor=ACTOR, reason="t")
    for a in apps:
        epoch = routing.set_binding(BindingKey.for_app(a.app), "primary", actor=ACTOR, reason="test")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    deadline = time.monotonic() + 60
    while (
        len([p for m in read_status(routing.zk, routing.layout, link) for p in m.partitions]) < 4 * PARTITIONS
    ):
        assert time.monotonic() < deadline, "the mirror never took up the link"
        time.sleep(0.2)

    watch = FlipWatch(routing, BindingKey.for_app(apps[0].app), "standby")
    try:
        for a in apps:
            a.start(live.gateway.bootstrap)
        wait_until("first records", apps, lambda a, s: len(s.acked) >= 100 and s.batches["manual"], 120)
        joined = {a.library: a.seen().batches["manual"][0]["t"] - a.started for a in apps}

        over = live.cli("switchover", *[a.app for a in apps], "--link", link, "--wait", "--reason", "compat")
        assert over.returncode == 0, over.stdout + over.stderr
        assert watch.at is not None
        flipped = watch.at
        wait_until(
            "traffic after the flip", apps,
            lambda a, s: sum(t > flipped for t in s.acked.values()) >= 100
            and len(s.received("manual")) >= len(s.acked) - 2 * RATE,
            120,
        )  # fmt: skip
        for a in apps:
            a.signal("stop-producing")
        wait_until("the producers' last records", apps, lambda a, s: s.produced is not None, 150)
        wait_until(
            "the consumers' last records", apps,
            lambda a, s: all(set(s.acked) <= set(s.received(g)) for g in ("manual", "auto")),
            90,
        )  # fmt: skip
    finally:
        watch.stop()
        for a in apps:
            a.signal("stop-producing")
            a.signal("stop")
        for a in apps:
            if a.process is not None:
                try:
                    a.process.wait(30)
                except subprocess.TimeoutExpired:
                    a.process.kill()
                    a.process.wait(10)

    rows, problems = [], []
    for a in apps:
        s = a.seen()
        manual, auto = s.received("manual"), s.received("auto")
        refused = Counter(b["commit"] for b in s.batches["manual"] if b["commit"])
        resumed = s.first_batch("manual", flipped)
        resume_s = resumed - flipped if resumed is not None else float("inf")
        on_standby = Counter(v for v in topic_ids(standby, a.topic))
        leaked = set(topic_ids(primary, a.topic)) - set(on_standby)
        row = {
            "library": a.library,
            "acked": len(s.acked),
            "failed sends": len(s.failed),
            "lost": len(set(s.acked) - set(manual)),
            "twice": sum(n > 1 for n in manual.values()),
            "commits refused": sum(refused.values()),
            "first join s": round(joined[a.library], 1),
            "resumed s": round(resume_s, 1),
            "auto-commit twice": sum(n > 1 for n in auto.values()),
        }
        rows.append(row)
        problems += [f"{a.library}: {p}" for p in (
            *(["sends failed: " + "; ".join(s.failed[:3])] if s.failed else []),
            *([f"{row['lost']} acknowledged records never processed"] if row["lost"] else []),
            *([f"{row['twice']} records processed twice"] if row["twice"] else []),
            *([f"commits refused: {dict(refused)}"] if refused else []),
            *([f"resumed {resume_s:.1f}s after the flip, first join took {joined[a.library]:.1f}s"]
              if resume_s > joined[a.library] + RESUME_MARGIN_S else []),
            *([f"not on the standby exactly once: {sorted(set(s.acked) ^ set(on_standby))[:5]}"]
              if set(on_standby) != set(s.acked) or max(on_standby.values()) > 1 else []),
            *([f"on the primary only: {sorted(leaked)[:5]}"] if leaked else []),
            *([f"lost to the auto-commit group: {sorted(set(s.acked) - set(auto))[:5]}"]
              if set(s.acked) - set(auto) else []),
            *s.errors[:3],
        )]  # fmt: skip
    print("\n" + table(rows))
    assert not problems, "\n".join(problems)


def table(rows: list[dict[str, Any]]) -> str:
    columns = list(rows[0])
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(str(r[c]).ljust(w) for c, w in zip(columns, widths, strict=True)) for r in rows]
    return "\n".join(lines)
