"""How close the gateway is to what a proxy of its design can reach: direct to a broker, through a plain
byte relay (``tests.helpers.relay``: Python, asyncio, bytes forwarded unparsed) and through the gateway,
in one run, the proxy pinned to a core of its own and the client and brokers to the other (as
production deploys a gateway: ``taskset``).

For each record size: produce at full speed (acks=all, linger 5 ms, keyed) and fetch it all back (assigned,
no group), in MiB/s of record payload; and the proxy's CPU seconds per GiB forwarded, from the kernel's
accounting of the proxy process (all its threads), with the MiB/s one core of it carries — figures that
compare across machines, unlike a ratio to a broker sharing the cores.

The relay's broker advertises the relay, so every connection of its clients passes through it; the
direct path and the gateway share another broker of the same build and settings.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from switchyard import kafka
from switchyard.config import Config
from switchyard.routing.store import RoutingStore
from switchyard.stack import health
from switchyard.table import render
from tests.bench.test_gateway_bench import fetch, full_speed
from tests.helpers import ports
from tests.helpers.kroxylicious import KROXYLICIOUS_VERSION, Kroxylicious
from tests.helpers.processes import GatewayProcess, cpu_seconds
from tests.helpers.services import PrivateService
from tests.helpers.stacks import KAFKA_DIST

SIZES = {1024: 200_000, 100: 1_000_000}
"""Record size (bytes) -> records per run: 195 MiB and 95 MiB of payload, enough for the CPU accounting's
10 ms ticks to be a small part of what is measured."""
PARTITIONS = 3
ROUNDS = 3
"""Each figure is the median of this many runs, each round starting with another path."""
PROXY_CORE, REST_CORE = 1, 0
MiB = 2**20


@dataclass
class Route:
    name: str
    bootstrap: str
    create_on: str
    """Where its topics are created (the broker it reaches)."""
    proxy: int | None
    """The proxy's pid (None: direct)."""


@dataclass
class Run:
    produce_mib_s: float
    fetch_mib_s: float
    produce_cpu_s: float | None
    fetch_cpu_s: float | None
    payload_mib: float


def median(runs: list[Run]) -> Run:
    def middle(values: list[float | None]) -> float | None:
        known = sorted(v for v in values if v is not None)
        return known[len(known) // 2] if known else None

    fields = [middle([getattr(r, f.name) for r in runs]) for f in dataclasses.fields(Run)]
    return Run(*fields)  # type: ignore[arg-type]


def pin(pid: int, core: int) -> None:
    """Every thread of ``pid`` (and those it starts later) onto ``core``."""
    subprocess.run(["taskset", "-a", "-cp", str(core), str(pid)], check=True, capture_output=True)


def measured(path: Route, size: int, count: int) -> Run:
    topic = f"relay-bench-{path.name}-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(path.create_on, [topic], partitions=PARTITIONS)
    full_speed(path.bootstrap, topic, size, 100)  # connections up before the clock starts
    cpu = (lambda: cpu_seconds(path.proxy)) if path.proxy is not None else (lambda: 0.0)
    before = cpu()
    produce_s = count / full_speed(path.bootstrap, topic, size, count)
    middle = cpu()
    fetch_s = (count + 100) / fetch(path.bootstrap, topic, count + 100)
    after = cpu()
    mib = size * count / MiB
    proxied = path.proxy is not None
    return Run(
        mib / produce_s, mib / fetch_s,
        (middle - before) if proxied else None, (after - middle) if proxied else None, mib,
    )  # fmt: skip


@pytest.fixture(scope="module")
def paths(
    routing: RoutingStore, stack_config: Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Route]]:
    directory = tmp_path_factory.mktemp("relay-bench")
    relay_port = ports.reserve(1)[0]
    relayed = PrivateService.kafka(directory / "relayed", advertised=relay_port)
    plain = PrivateService.kafka(directory / "plain")
    relay: subprocess.Popen[bytes] | None = None
    gateway: GatewayProcess | None = None
    kroxylicious: Kroxylicious | None = None
    try:
        for broker in (relayed, plain):
            broker.start()
        relay = subprocess.Popen(
            [sys.executable, "-m", "tests.helpers.relay", str(relay_port), relayed.connect],
            cwd=Path(__file__).resolve().parents[2],
        )
        deadline = time.monotonic() + 30
        while not health.kafka("127.0.0.1", relay_port).ok:
            assert time.monotonic() < deadline, "the relay never answered"
            time.sleep(0.1)
        assert stack_config.source is not None
        gateway = GatewayProcess(
            stack_config.source, root=routing.layout.root, gateway_id="gw-relay-bench",
            log=directory / "gateway.log",
            overrides={"SWITCHYARD__CLUSTERS__PRIMARY__BOOTSTRAP": plain.connect},
        )  # fmt: skip
        gateway.start()
        assert gateway.process is not None
        kroxylicious = Kroxylicious(KAFKA_DIST, directory / "kroxylicious", target=plain.connect,
                                    port=ports.reserve_block(4))  # fmt: skip
        kroxylicious.start()
        assert kroxylicious.process is not None
        for pid in (relay.pid, gateway.process.pid, kroxylicious.process.pid):
            pin(pid, PROXY_CORE)
        for broker in (relayed, plain):
            broker_pid = broker.process.pid()
            assert broker_pid is not None
            pin(broker_pid, REST_CORE)
        yield [
            Route("direct", plain.connect, plain.connect, None),
            Route("relay", f"127.0.0.1:{relay_port}", f"127.0.0.1:{relay_port}", relay.pid),
            Route("gateway", gateway.bootstrap, plain.connect, gateway.process.pid),
            Route("kroxylicious", kroxylicious.bootstrap, plain.connect, kroxylicious.process.pid),
        ]
    finally:
        if kroxylicious is not None:
            kroxylicious.stop()
        if gateway is not None:
            gateway.stop()
        if relay is not None:
            relay.terminate()
            relay.wait(10)
        for broker in (relayed, plain):
            broker.stop()


def test_the_gateway_against_kroxylicious_a_plain_relay_and_direct(paths: list[Route]) -> None:
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {REST_CORE})  # the client (and librdkafka's threads, started after) on one core
    try:
        collected: dict[tuple[str, int], list[Run]] = {}
        for round_ in range(ROUNDS):
            turn = paths[round_ % len(paths) :] + paths[: round_ % len(paths)]
            for size, count in SIZES.items():
                for p in turn:
                    collected.setdefault((p.name, size), []).append(measured(p, size, count))
        runs = {key: median(found) for key, found in collected.items()}
    finally:
        os.sched_setaffinity(0, cores)

    def per_gib(cpu_s: float | None, mib: float) -> str:
        return "" if cpu_s is None else f"{cpu_s / (mib / 1024):.1f}"

    def per_core(cpu_s: float | None, mib: float) -> str:
        return "" if not cpu_s else f"{mib / cpu_s:.0f}"

    def ratio(ours: float | None, theirs: float | None) -> str:
        return "" if not ours or not theirs else f"{ours / theirs:.2f}x"

    rows = []
    for size in SIZES:
        for p in paths:
            r = runs[(p.name, size)]
            rows.append((
                p.name, f"{size} B", f"{r.produce_mib_s:.1f}", f"{r.fetch_mib_s:.1f}",
                per_gib(r.produce_cpu_s, r.payload_mib), per_core(r.produce_cpu_s, r.payload_mib),
                per_gib(r.fetch_cpu_s, r.payload_mib), per_core(r.fetch_cpu_s, r.payload_mib),
            ))  # fmt: skip
        g, relay, d, k = (runs[(name, size)] for name in ("gateway", "relay", "direct", "kroxylicious"))
        rows.append((
            "gateway/kroxylicious", f"{size} B", f"{g.produce_mib_s / k.produce_mib_s:.0%}",
            f"{g.fetch_mib_s / k.fetch_mib_s:.0%}", ratio(g.produce_cpu_s, k.produce_cpu_s), "",
            ratio(g.fetch_cpu_s, k.fetch_cpu_s), "",
        ))  # fmt: skip
        rows.append((
            "gateway/relay", f"{size} B", f"{g.produce_mib_s / relay.produce_mib_s:.0%}",
            f"{g.fetch_mib_s / relay.fetch_mib_s:.0%}", "", "", "", "",
        ))  # fmt: skip
        rows.append((
            "gateway/direct", f"{size} B", f"{g.produce_mib_s / d.produce_mib_s:.0%}",
            f"{g.fetch_mib_s / d.fetch_mib_s:.0%}", "", "", "", "",
        ))  # fmt: skip
    print(
        f"\nproxies pinned to core {PROXY_CORE}, client and brokers to core {REST_CORE}; "
        f"{PARTITIONS} partitions; payload MiB/s; medians of {ROUNDS} rounds; "
        f"Kroxylicious {KROXYLICIOUS_VERSION} (runtime, pass-through)"
    )
    print(
        render(
            (
                "path",
                "records",
                "produce MiB/s",
                "fetch MiB/s",
                "produce CPU s/GiB",
                "produce MiB/s/core",
                "fetch CPU s/GiB",
                "fetch MiB/s/core",
            ),
            rows,
        )
    )
