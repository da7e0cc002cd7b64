"""The C load generator (``tests/bench/loadgen.c``): built once per source version with the system's C
compiler and librdkafka's headers (``infra/install-system-packages.sh`` installs them), then run as a
process of its own, pinned where the bench wants it.

It links the librdkafka that confluent-kafka's wheel carries (2.16), not Debian's (2.0.2): the Python tests'
clients use that one, and Debian's fails its ApiVersions exchange with Tansu ("Read underflow")."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka

from tests.helpers.built import built_once

_SOURCE = Path(__file__).resolve().parents[1] / "bench" / "loadgen.c"


@dataclass(frozen=True)
class Load:
    """What one fixed load achieved; latencies in ms."""

    sent: int
    acked: int
    failed: int
    achieved_mib_s: float
    seconds: float
    produce_p50: float
    produce_p99: float
    produce_samples: int
    e2e_p50: float
    e2e_p99: float
    e2e_samples: int


def binary() -> Path:
    """The built generator, compiled if this version of the source has not been."""
    libraries = Path(confluent_kafka.__file__).resolve().parents[1] / "confluent_kafka.libs"
    found = sorted(libraries.glob("librdkafka-*.so*"))
    if not found:
        raise RuntimeError(f"no librdkafka in {libraries}: is confluent-kafka installed from its wheel?")
    library = found[0]

    def compile_into(folder: Path) -> None:
        subprocess.run(
            ["cc", "-O2", "-Wall", "-Werror", "-o", str(folder / "loadgen"), str(_SOURCE), str(library),
             f"-Wl,-rpath,{libraries}", "-lpthread"],
            check=True,
        )  # fmt: skip

    inputs = _SOURCE.read_bytes() + str(library).encode()
    return built_once("loadgen", "generator", inputs, compile_into) / "loadgen"


def offer(
    bootstrap: str, topic: str, *, partitions: int, size: int, mib_s: int, seconds: int, core: int | None
) -> Load:
    """Offer ``mib_s`` of ``size``-byte records to ``topic`` for ``seconds`` while reading it back."""
    command = [str(binary()), bootstrap, topic, *map(str, (partitions, size, mib_s, seconds))]
    if core is not None:
        command = ["taskset", "-c", str(core), *command]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=seconds + 120)
    if done.returncode != 0:
        raise RuntimeError(f"loadgen exited {done.returncode}: {done.stderr.strip()}")
    return Load(**json.loads(done.stdout))
