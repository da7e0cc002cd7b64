"""Apache Kafka clusters of a test's own, run by the stack's own code without the rest of a stack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from switchyard.config import load_config
from switchyard.stack import Stack
from tests.helpers import ports
from tests.helpers.stacks import KAFKA_DIST

SOLO = "solo"


def cluster_config(
    directory: Path, *, brokers: int = 1, version: str | None = None, properties: dict[str, Any] | None = None
) -> Path:
    """A configuration whose one cluster, ``solo``, has ``brokers`` brokers on reserved ports."""
    clients, controllers = ports.reserve(brokers), ports.reserve(brokers)
    listeners = ",".join(f"127.0.0.1:{p}" for p in controllers)
    solo: dict[str, Any] = {"brokers": brokers, "controllers": listeners}
    if version:
        solo["version"] = version
    if properties:
        solo["properties"] = properties
    data = {
        "clusters": {SOLO: {"bootstrap": ",".join(f"127.0.0.1:{p}" for p in clients)}},
        "default_cluster": SOLO,
        "stack": {"state_dir": str(directory / "state"), "kafka": {"dist_dir": str(KAFKA_DIST)},
                  "clusters": {SOLO: solo}},
    }  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "switchyard.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def cluster_stack(path: Path) -> Stack:
    """The stack of ``path`` reduced to its cluster's brokers (no ZooKeeper, no Temporal)."""
    config = load_config(path, environ={})
    return Stack(config, only={f"kafka-{SOLO}", *(f"kafka-{SOLO}-{n}" for n in range(1, 6))})
