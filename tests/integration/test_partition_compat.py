"""A smooth partition migration under five client libraries at their default settings (``tests/compat``):
each application produces through one producer per compression codec its library supports, and
consumes in a group committing after each batch; one partition of each application's topic is migrated
by the saga while they run.

Judged by what each application saw: every send reported once and acknowledged, every acknowledged
record processed, none twice, the group's offsets of the migrated partition going on across the end
offset without a gap or a step back, and every record held once across the two clusters. The pause of
the partition's sends is printed (``make bench`` measures it over several runs).
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

from switchyard import kafka
from switchyard.config import Config
from switchyard.model import PartitionId
from switchyard.routing.store import RoutingStore
from tests.helpers.compat import (
    CODECS,
    LIBRARIES,
    App,
    ended_badly,
    unaccounted_sends,
    unexpected_retries,
    wait_until,
)
from tests.helpers.live import Live, unique
from tests.integration.test_compat import table

PARTITIONS = 3
MOVED = 1
RATE = 30


def test_five_client_libraries_at_their_defaults_see_nothing_of_a_partition_migration(
    live: Live, routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    assert live.gateway is not None
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    apps = [
        App(lib, "one gateway", unique("pmc"), unique("pmc-t"), tmp_path / lib.replace("/", "-"))
        for lib in LIBRARIES
    ]
    kafka.create_topics(primary, [a.topic for a in apps], partitions=PARTITIONS)
    kafka.create_topics(standby, [a.topic for a in apps], partitions=PARTITIONS)
    for a in apps:  # a record of the target's own before the migration: client offsets must leave it out
        kafka.produce(standby, a.topic, [kafka.Record(b"before", b"-1", MOVED)])
    moved_at: dict[str, float] = {}
    try:
        for a in apps:
            a.start(live.gateway.bootstrap, rate=RATE, codecs=CODECS[a.library])
        wait_until("first records", apps, lambda a, s: len(s.acked) >= 100 and s.batches["manual"], 120)
        runs = live.cli_together(
            *(("migrate-partition", a.topic, str(MOVED), "--to", "standby", "--wait") for a in apps)
        )
        for a, (code, said) in zip(apps, runs, strict=True):
            assert code == 0, said
            moved_at[a.library] = max(a.seen().acked.values())
        wait_until(
            "traffic after the migrations", apps,
            lambda a, s: sum(t > moved_at[a.library] for t in s.acked.values()) >= 2 * RATE, 120,
        )  # fmt: skip
        for a in apps:
            a.signal("stop-producing")
        wait_until("the producers' last records", apps, lambda a, s: s.produced is not None, 150)
        wait_until(
            "the consumers' last records", apps, lambda a, s: set(s.acked) <= set(s.received("manual")), 90
        )
    finally:
        for a in apps:
            a.stop()

    rows, problems = [], []
    for a in apps:
        row, found = judge(a, routing, primary, standby)
        rows.append(row)
        problems += [f"{a.library}: {p}" for p in found]
    print("\n" + table(rows))
    assert not problems, "\n".join(problems)


def judge(a: App, routing: RoutingStore, primary: str, standby: str) -> tuple[dict[str, Any], list[str]]:
    s = a.seen()
    manual = s.received("manual")
    migration = routing.migration(PartitionId(a.topic, MOVED))
    end = migration.end_offset if migration is not None else None
    on_primary = {
        p: [int(r.value or b"-1") for r in rs] for p, rs in kafka.read_partitions(primary, a.topic).items()
    }
    base = migration.target_base if migration is not None else 0  # the record written before the migration
    on_standby = [
        int(r.value or b"-1")
        for r in kafka.read_partitions(standby, a.topic).get(MOVED, [])
        if r.offset >= base
    ]
    held = Counter(v for vs in on_primary.values() for v in vs) + Counter(on_standby)
    offsets = [o for b in a.seen().batches["manual"] for p, o, _ in b["recs"] if p == MOVED]
    row = {
        "library": a.library,
        "codecs": ",".join(CODECS[a.library]) or "none",
        "acked": len(s.acked),
        "end offset": end,
        "on the target": len(on_standby),
        "lost": len(set(s.acked) - set(manual)),
        "twice": sum(n > 1 for n in manual.values()),
        "sends paused s": round(paused(s.events), 3),
        "exit": a.exit_code,
    }
    problems = [
        *unaccounted_sends(s),
        *(["sends failed: " + "; ".join(s.failed[:3])] if s.failed else []),
        *([f"{row['lost']} acknowledged records never processed"] if row["lost"] else []),
        *([f"{row['twice']} records processed twice"] if row["twice"] else []),
        *([f"not migrated: {migration}"] if end is None or migration.state != "migrated" else []),  # type: ignore[union-attr]
        *([f"{len(on_primary.get(MOVED, []))} records on the origin's partition, its end offset {end}"]
          if end is not None and len(on_primary.get(MOVED, [])) != end else []),
        *([f"not held once across the clusters: {where(a.topic, primary, standby, s, held)}"]
          if set(held) != set(s.acked) or max(held.values()) > 1 else []),
        *([f"the group's offsets of [{MOVED}] did not go on one by one: {stepped}"]
          if (stepped := first_step(offsets)) else []),
        *([f"no record read past the end offset {end}"] if end is not None and max(offsets) < end else []),
        *s.errors[:3],
        *unexpected_retries(s),
        *ended_badly(a),
    ]  # fmt: skip
    return row, problems


def where(topic: str, primary: str, standby: str, s: Any, held: Counter[int]) -> str:
    """Each record acknowledged but not held once: where each cluster holds it, and its acknowledgement."""
    odd = sorted((set(s.acked) ^ set(held)) | {v for v, n in held.items() if n > 1})[:5]
    found = {
        v: [(name, p, r.offset) for name, b in (("primary", primary), ("standby", standby))
            for p, rs in kafka.read_partitions(b, topic).items() for r in rs if int(r.value or b"-1") == v]
        for v in odd
    }  # fmt: skip
    acks = {e["v"]: (e.get("p"), e.get("o")) for e in s.events if e["k"] == "acked" and e["v"] in odd}
    return "; ".join(f"{v}: acked at {acks.get(v)}, held at {found[v]}" for v in odd)


def first_step(offsets: list[int]) -> str | None:
    """The first offset that is not the one after the last (a group resuming at its last commit may step
    back to one already seen; never over one not yet seen)."""
    highest = -1
    for before, after in itertools.pairwise(offsets):
        highest = max(highest, before)
        if not (after == before + 1 or after <= highest):
            return f"{after} after {before}"
    return None


def paused(events: list[dict[str, Any]]) -> float:
    """The longest time between two acknowledgements of the migrated partition's records."""
    times = sorted(e["t"] for e in events if e["k"] == "acked" and e.get("p") == MOVED)
    return max((b - x for x, b in itertools.pairwise(times)), default=0.0)
