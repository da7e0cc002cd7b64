"""A second, private stack driven through the `switchyard` command the way an operator would."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from switchyard.config import load_config
from switchyard.stack import Stack
from tests.helpers.stacks import write_stack_config


def switchyard(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "switchyard", "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def live(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting to be reaped by init."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def recorded_pids(state_dir: Path) -> dict[str, int]:
    return {p.stem: json.loads(p.read_text())["pid"] for p in state_dir.glob("*.pid")}


@pytest.fixture
def config_path(tmp_path: Path) -> Iterator[Path]:
    path = write_stack_config(tmp_path)
    yield path
    Stack(load_config(path, environ={})).down()  # whatever a failing test left running


def test_up_status_kill_down_leaves_nothing_behind(config_path: Path) -> None:
    state_dir = config_path.parent / "state"

    up = switchyard(config_path, "stack", "up")
    assert up.returncode == 0, up.stderr
    pids = recorded_pids(state_dir)
    assert set(pids) == {"zookeeper", "kafka-primary", "kafka-standby", "temporal"}
    assert all(live(pid) for pid in pids.values())

    again = switchyard(config_path, "stack", "up")
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already running") == 4
    assert recorded_pids(state_dir) == pids

    status = switchyard(config_path, "stack", "status")
    assert status.returncode == 0, status.stdout

    os.kill(pids["kafka-standby"], signal.SIGKILL)
    while live(pids["kafka-standby"]):
        time.sleep(0.05)
    status = switchyard(config_path, "stack", "status")
    assert status.returncode == 1
    health = {line.split()[0]: line.split()[3] for line in status.stdout.splitlines()[1:]}
    assert health == {
        "zookeeper": "ok",
        "kafka-primary": "ok",
        "kafka-standby": "DOWN",
        "temporal": "ok",
        "temporal-ui": "ok",
    }

    down = switchyard(config_path, "stack", "down")
    assert down.returncode == 0, down.stderr
    assert set(down.stdout.split()) >= {"zookeeper:", "kafka-primary:", "temporal:"}
    assert "kafka-standby" not in down.stdout  # it was already dead: nothing to stop
    assert not any(live(pid) for pid in pids.values())
    assert not list(state_dir.glob("*.pid"))
    assert switchyard(config_path, "stack", "status").returncode == 1


def test_a_port_held_by_a_stranger_fails_up_and_leaves_nothing_running(config_path: Path) -> None:
    config = load_config(config_path, environ={})
    host, port = config.clusters["standby"].bootstrap.split(":")
    with socket.create_server((host, int(port))):
        up = switchyard(config_path, "stack", "up")
    assert up.returncode == 3
    assert f"kafka-standby: {host}:{port} is in use by a process this stack did not start" in up.stderr
    assert not list((config_path.parent / "state").glob("*.pid"))


def test_files_in_the_way_stop_up_with_the_service_named(config_path: Path) -> None:
    config = load_config(config_path, environ={})
    blocker = config.stack.state_dir / "zookeeper" / "data"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where ZooKeeper wants its data directory")
    up = switchyard(config_path, "stack", "up")
    assert up.returncode == 3
    assert "zookeeper: cannot prepare its files" in up.stderr
    assert not list(config.stack.state_dir.glob("*.pid"))


def test_a_service_that_dies_during_start_up_is_reported_with_its_log(
    config_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every JVM refuses to start: ZooKeeper, started first, exits; so does the first Kafka broker, or
    the storage tool formatting its version's template if none was made yet. ``up`` reports the first it
    meets, by name, in the JVM's own words."""
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-XX:+NoSuchOptionForThisTest")
    up = switchyard(config_path, "stack", "up")
    assert up.returncode == 3
    assert re.search(r"\b(zookeeper|kafka-primary): ", up.stderr), up.stderr
    assert "Unrecognized VM option 'NoSuchOptionForThisTest'" in up.stderr
    assert not list((config_path.parent / "state").glob("*.pid"))
