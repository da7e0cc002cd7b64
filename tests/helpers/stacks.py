"""Configurations for embedded stacks of the tests' own, on reserved ports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from switchyard.stack import TESTBED_CONSUMER_SETTINGS
from tests.helpers import ports


def stack_config_data(state_dir: Path) -> dict[str, Any]:
    zk, primary, standby, temporal, ui = ports.reserve(5)
    return {
        "clusters": {
            "primary": {"bootstrap": f"127.0.0.1:{primary}"},
            "standby": {"bootstrap": f"127.0.0.1:{standby}"},
        },
        "default_cluster": "primary",
        "zookeeper": {"connect": f"127.0.0.1:{zk}"},
        "temporal": {"address": f"127.0.0.1:{temporal}"},
        "gateway": {"bootstrap_port": ports.reserve_block(16)},
        "stack": {"state_dir": str(state_dir), "temporal_ui_port": ui},
        "spark": {"submit_args": QUICK_JVMS},
        "mirror": {"consumer": dict(TESTBED_CONSUMER_SETTINGS)},  # Tansu joins a group in 3 s, not 23
    }


QUICK_JVMS = [
    *("--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1"),
    *("--conf", "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1"),
]
"""The JVMs of the tests' Spark jobs compile with C1 only: their jobs are short and their JVM work is
light, and on the 2-core test machine this takes some 4 s off each job's 14 (see docs/testbed.md)."""


def write_stack_config(directory: Path) -> Path:
    """A config for an isolated stack on reserved ports, its state under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "switchyard.yaml"
    path.write_text(yaml.safe_dump(stack_config_data(directory / "state"), sort_keys=False))
    return path
