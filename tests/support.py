"""Test-side helpers: free ports and configurations for stacks that never collide with another run."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import yaml


def free_ports(count: int) -> list[int]:
    """Ports nobody listens on right now, distinct from each other (held open together while chosen)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def stack_config_data(state_dir: Path) -> dict[str, Any]:
    zk, primary, standby, temporal, ui, gateway = free_ports(6)
    return {
        "clusters": {
            "primary": {"bootstrap": f"127.0.0.1:{primary}"},
            "standby": {"bootstrap": f"127.0.0.1:{standby}"},
        },
        "default_cluster": "primary",
        "zookeeper": {"connect": f"127.0.0.1:{zk}"},
        "temporal": {"address": f"127.0.0.1:{temporal}"},
        "gateway": {"bootstrap_port": gateway},
        "stack": {"state_dir": str(state_dir), "temporal_ui_port": ui},
    }


def write_stack_config(directory: Path) -> Path:
    """A config for an isolated stack on free ports, its state under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "switchyard.yaml"
    path.write_text(yaml.safe_dump(stack_config_data(directory / "state"), sort_keys=False))
    return path
