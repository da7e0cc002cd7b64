"""`make demo` as a new user runs it: the command, on the session stack, switching a live application
over and back — and its report counting every record."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from switchyard.config import Config
from switchyard.routing import open_store
from switchyard.stack import Stack
from switchyard.stack.deployment import Deployment


@pytest.fixture
def deployment(stack: Stack, stack_config: Config) -> Iterator[Deployment]:
    deployed = Deployment(stack_config)
    yield deployed
    assert deployed.down() == ["worker", "mirror", "gateway"]  # the demo left them running, as it says


def test_the_demo_switches_a_live_application_over_and_back_and_counts_every_record(
    deployment: Deployment, stack_config: Config
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "switchyard", "--config", str(stack_config.source), "demo", "--rate", "300"],
        capture_output=True, text=True, timeout=600, env=os.environ, check=False,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert re.search(r"switchover switched: demo-shop-\w+", out)
    assert re.search(r"switchback switched: demo-shop-\w+", out)
    produced = re.search(r"produced (\d+) records: (\d+) acknowledged, 0 failed", out)
    assert produced is not None, out
    assert produced[1] == produced[2]
    assert f"{produced[1]} records; lost 0, written twice 0" in out
    assert f"processed {produced[1]} of {produced[1]}, missed 0, in order: yes" in out
    assert (
        out.count(f"{stack_config.temporal_ui_url}/namespaces/default/workflows/switchyard:demo-shop-") >= 4
    )
    assert "processed twice: 0 (each commit made during a switch was carried" in out
    assert "== nothing lost, nothing written or processed twice" in out
    assert "invalid MessageSetSize" not in done.stderr  # blocked fetches parse in librdkafka
    tidied = re.search(r"== tidied up: links (\S+), (\S+), (\S+) deleted", out)
    assert tidied is not None, out  # the demo's link, its reverse, and the reverse's reverse
    with open_store(stack_config) as store:
        assert not set(tidied.groups()) & set(store.snapshot().links), "a link of the demo stayed"
