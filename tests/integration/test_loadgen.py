"""The C load generator that ``make bench`` drives the fixed loads with: it builds here, offers what it is
told to a real broker, times every record both ways, and refuses bad arguments by name."""

from __future__ import annotations

import subprocess
import uuid

from switchyard import kafka
from switchyard.config import Config
from switchyard.stack import Stack
from tests.helpers.loadgen import binary, offer


def test_it_offers_a_fixed_load_and_times_every_record(stack: Stack, stack_config: Config) -> None:
    bootstrap = stack_config.clusters["primary"].bootstrap
    topic = f"loadgen-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(bootstrap, [topic], partitions=2)
    run = offer(bootstrap, topic, partitions=2, size=512, mib_s=1, seconds=1, core=None)
    assert run.sent == 2048  # 1 MiB of 512-byte records
    assert run.acked == run.sent
    assert run.failed == 0
    assert run.produce_samples == run.e2e_samples == run.sent
    assert 0 < run.produce_p50 <= run.produce_p99
    assert 0 < run.e2e_p50 <= run.e2e_p99
    ends = kafka.ends_of(bootstrap, [(topic, 0), (topic, 1)])
    assert sum(ends.values()) == run.sent + 1  # and the warm-up record


def refused(*arguments: str) -> str:
    """What the generator says on stderr as it exits 2 for ``arguments``."""
    done = subprocess.run([str(binary()), *arguments], check=False, capture_output=True, text=True)
    assert done.returncode == 2
    return done.stderr


def test_bad_arguments_are_named() -> None:
    assert "RECORD_BYTES must be at least 8" in refused("b:1", "t", "3", "4", "5", "1")
    assert "PARTITIONS must be a positive integer, not 'x'" in refused("b:1", "t", "x", "512", "5", "1")
    assert "usage: loadgen" in refused("b:1")
