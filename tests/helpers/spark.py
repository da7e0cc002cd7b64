"""A Spark standalone cluster of the tests' own, started as the embedded stack starts one."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

from switchyard.config import Config, StackConfig, StackSparkConfig
from switchyard.stack import Stack
from switchyard.stack.control import ServiceStatus
from tests.helpers import ports


@dataclass
class SparkCluster:
    """A master and ``workers`` workers of one core and 1 GiB each, on reserved ports; ``config``
    submits jobs to it."""

    config: Config
    stack: Stack

    @classmethod
    def of(cls, base: Config, state_dir: Path, workers: int = 2) -> SparkCluster:
        port = ports.reserve_block(2 + workers)  # the master, its web UI, each worker's web UI
        spark = StackSparkConfig(workers=workers, worker_cores=1, worker_memory="1g", ui_port=port + 1)
        config = base.model_copy(
            update={
                "spark": base.spark.model_copy(update={"master": f"spark://127.0.0.1:{port}"}),
                "stack": StackConfig(state_dir=state_dir, spark=spark),
            }
        )
        return cls(config, Stack(config))

    def up(self, workers: int | None = None) -> list[ServiceStatus]:
        """Start the master and the first ``workers`` workers (all by default) unless running, and wait
        until the master lists them alive."""
        count = self.config.stack.spark.workers if workers is None else workers
        names = ["spark-master", *(f"spark-worker-{i}" for i in range(1, count + 1))]
        self.stack.services = [s for s in Stack(self.config).services if s.name in names]
        statuses = self.stack.up(timeout_s=120)
        assert all(s.health.ok for s in statuses), statuses
        return statuses

    def down(self) -> None:
        self.stack.services = [s for s in Stack(self.config).services if s.name.startswith("spark-")]
        self.stack.down()
        assert not [s.name for s in self.stack.status() if s.pid is not None]

    def kill(self, name: str) -> None:
        """SIGKILL to the service's process group: a worker goes with its executors, as a lost machine."""
        pid = self.stack.process(next(s for s in self.stack.services if s.name == name)).pid()
        assert pid is not None, f"{name} is not running"
        os.killpg(pid, signal.SIGKILL)
