"""The gateway at fixed loads: for records of 1 KiB and of 100 B, a client offers 5, 20 and 50 MiB/s for a
few seconds to each path of :mod:`tests.bench.test_relay_bench` (direct, a plain relay, the gateway) while
reading the topic back as it fills — as production deploys a gateway: the proxy pinned to a core of its
own, the client and the brokers to the other.

The client is the C load generator (``tests/bench/loadgen.c``, librdkafka at its defaults but linger 1 ms).
A Python client shared the brokers' core badly: one interpreted call per record queued the brokers' work
(direct p50 went from 1.5 ms to 6 ms, a proxy's to over a second at 5 MiB/s), and left unpinned it took the
proxy's core instead, so the proxies' figures measured the client.

Per path and load: the rate achieved against the one offered; the produce latency (``produce()`` to the
acknowledgement, acks=all, librdkafka's own measure) at p50 and p99; the end-to-end latency (``produce()``
to the consumer's receipt, through the proxy both ways) at p50 and p99; for the proxies what they add to
the direct path's figures in the same run, and the proxy's CPU as a share of one core over the time the load
took (to the last acknowledgement). Every record is timed; each figure is the median of ROUNDS runs, each
round starting with another path. A load the client and brokers cannot carry on their core shows as
achieved below offered on the direct path too.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import uuid

import pytest

from switchyard import kafka
from switchyard.table import render
from tests.bench.test_relay_bench import PROXY_CORE, REST_CORE, Route, paths  # noqa: F401 - fixture
from tests.helpers.loadgen import Load, offer
from tests.helpers.processes import cpu_seconds

LOADS_MIB_S = (5, 20, 50)
SIZES = (1024, 100)
SECONDS = int(os.environ.get("SWITCHYARD_LOAD_S", "5"))
PARTITIONS = 3
ROUNDS = int(os.environ.get("SWITCHYARD_LOAD_ROUNDS", "3"))

PATHS = 4
"""direct, the plain relay, the gateway, Kroxylicious (:func:`tests.bench.test_relay_bench.paths`)."""

pytestmark = pytest.mark.timeout(ROUNDS * len(SIZES) * len(LOADS_MIB_S) * PATHS * (SECONDS + 60) + 300)


def measured(path: Route, size: int, load: int) -> tuple[Load, float]:
    """One fixed load on one path, and the proxy's CPU as a share of a core over the time it took."""
    topic = f"load-{path.name}-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(path.create_on, [topic], partitions=PARTITIONS)
    cpu_before = cpu_seconds(path.proxy) if path.proxy else 0.0
    run = offer(
        path.bootstrap, topic, partitions=PARTITIONS, size=size, mib_s=load, seconds=SECONDS, core=REST_CORE
    )
    cpu = (cpu_seconds(path.proxy) - cpu_before) if path.proxy else 0.0
    assert run.acked == run.sent, f"{path.name}: {run.sent - run.acked} of {run.sent} not acknowledged"
    # the proxy's CPU includes the generator's second of warm-up and its read-back after the last
    # acknowledgement: a little over, never under, its share
    return run, cpu / run.seconds


def median(runs: list[tuple[Load, float]]) -> tuple[Load, float]:
    loads = [load for load, _ in runs]
    middle = {f.name: statistics.median(getattr(r, f.name) for r in loads) for f in dataclasses.fields(Load)}
    return Load(**middle), statistics.median(cpu for _, cpu in runs)


def test_fixed_loads(paths: list[Route]) -> None:  # noqa: F811
    collected: dict[tuple[str, int, int], list[tuple[Load, float]]] = {}
    for round_ in range(ROUNDS):
        turn = paths[round_ % len(paths) :] + paths[: round_ % len(paths)]
        for size in SIZES:
            for load in LOADS_MIB_S:
                for path in turn:
                    collected.setdefault((path.name, size, load), []).append(measured(path, size, load))
    results = {key: median(runs) for key, runs in collected.items()}
    rows = []
    for size in SIZES:
        for load in LOADS_MIB_S:
            direct, _ = results[("direct", size, load)]
            for path in paths:
                r, cpu = results[(path.name, size, load)]
                added = "" if path.proxy is None else (
                    f"{r.produce_p50 - direct.produce_p50:+.2f} / {r.produce_p99 - direct.produce_p99:+.2f}"
                )  # fmt: skip
                added_e2e = "" if path.proxy is None else (
                    f"{r.e2e_p50 - direct.e2e_p50:+.2f} / {r.e2e_p99 - direct.e2e_p99:+.2f}"
                )  # fmt: skip
                rows.append((
                    f"{size} B", f"{load}", path.name, f"{r.achieved_mib_s:.1f}", f"{r.produce_p50:.2f}",
                    f"{r.produce_p99:.2f}", added, f"{r.e2e_p50:.2f}", f"{r.e2e_p99:.2f}", added_e2e,
                    f"{cpu:.0%}" if path.proxy else "",
                ))  # fmt: skip
    print(f"\n\nfixed loads for {SECONDS} s each; proxies pinned to core {PROXY_CORE}, brokers and the C "
          f"client to core {REST_CORE}; every record timed, ms; medians of {ROUNDS} rounds")  # fmt: skip
    header = ("RECORDS", "OFFERED MiB/s", "PATH", "ACHIEVED MiB/s", "PRODUCE p50", "p99", "ADDED p50 / p99",
              "END TO END p50", "p99", "ADDED p50 / p99", "PROXY CPU")  # fmt: skip
    print(render(header, rows))
    print(render(("RECORDS", "OFFERED MiB/s", "ADDED PRODUCE p99, GATEWAY / KROXYLICIOUS",
                  "ADDED END-TO-END p99, GATEWAY / KROXYLICIOUS", "PROXY CPU, GATEWAY / KROXYLICIOUS"),
                 beside_kroxylicious(results)))  # fmt: skip
    read = [r.e2e_samples / max(r.produce_samples, 1) for r, _ in results.values()]
    print(f"end-to-end samples read back: {min(read):.0%} at least")


def beside_kroxylicious(results: dict[tuple[str, int, int], tuple[Load, float]]) -> list[tuple[str, ...]]:
    """Per size and load, what the gateway adds to the direct path's p99 beside what Kroxylicious adds,
    and their CPU (each as a share of a core over its own run, so per record carried at the same load)."""
    rows: list[tuple[str, ...]] = []
    for size in SIZES:
        for load in LOADS_MIB_S:
            direct, _ = results[("direct", size, load)]
            (g, g_cpu), (k, k_cpu) = results[("gateway", size, load)], results[("kroxylicious", size, load)]
            rows.append((
                f"{size} B", f"{load}",
                f"{g.produce_p99 - direct.produce_p99:+.2f} / {k.produce_p99 - direct.produce_p99:+.2f} ms",
                f"{g.e2e_p99 - direct.e2e_p99:+.2f} / {k.e2e_p99 - direct.e2e_p99:+.2f} ms",
                f"{g_cpu:.0%} / {k_cpu:.0%} ({g_cpu / k_cpu:.2f}x)" if k_cpu else f"{g_cpu:.0%} / -",
            ))  # fmt: skip
    return rows
