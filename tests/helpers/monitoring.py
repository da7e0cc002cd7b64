"""Debian's Prometheus and Alertmanager as a test's own servers: generated configurations, free ports,
ready when their ``/-/ready`` answers, and their APIs for what they hold (alerts firing, alerts sent)."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from switchyard.stack.process import ManagedProcess
from tests.helpers import ports

PROMETHEUS = "/usr/bin/prometheus"
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"


class _Server:
    def __init__(self, name: str, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port = ports.reserve_block(1)
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = ManagedProcess(name, directory)

    def _start(self, argv: list[str]) -> None:
        self.process.start(argv)
        deadline = time.monotonic() + 30
        while not self._ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.process.name} did not start:\n{self.process.log_tail()}")
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=5) as answer:
            return json.loads(answer.read())

    def stop(self) -> None:
        self.process.stop()


class PrometheusServer(_Server):
    """Scrapes ``targets`` (host:port, job name -> list) every ``interval_s``, evaluates ``rules`` as often
    and sends what fires to ``alertmanager`` (its URL)."""

    def __init__(
        self,
        directory: Path,
        targets: dict[str, list[str]],
        rules: list[Path],
        alertmanager: str,
        *,
        interval_s: float = 1.0,
    ) -> None:
        super().__init__("prometheus", directory)
        every = f"{int(interval_s * 1000)}ms"
        manager = alertmanager.removeprefix("http://")
        config = {
            "global": {"scrape_interval": every, "evaluation_interval": every, "scrape_timeout": every},
            "rule_files": [str(rule) for rule in rules],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [manager]}]}]},
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": hosts}]} for job, hosts in targets.items()
            ],
        }
        self.config = directory / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config))

    def start(self) -> None:
        self._start([
            PROMETHEUS, f"--config.file={self.config}", f"--storage.tsdb.path={self.directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            # Prometheus learns its Alertmanagers some 5 s after starting and drops what fired before;
            # a firing alert is sent again after this (1 m by default)
            "--rules.alert.resend-delay=1s",
        ])  # fmt: skip

    def firing(self) -> list[dict[str, Any]]:
        """The alerts firing now (pending ones left out)."""
        alerts: list[dict[str, Any]] = self.get("/api/v1/alerts")["data"]["alerts"]
        return [a for a in alerts if a["state"] == "firing"]

    def value(self, query: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        from urllib.parse import quote

        result: list[dict[str, Any]] = self.get(f"/api/v1/query?query={quote(query)}")["data"]["result"]
        return result


class AlertmanagerServer(_Server):
    """Routes every alert to ``receiver_url`` with the bearer token in ``token_file``, at once (no group
    wait) unless told otherwise; no HA peers."""

    def __init__(
        self,
        directory: Path,
        receiver_url: str,
        token_file: Path,
        *,
        group_wait: str = "0s",
        group_interval: str = "1s",
        repeat_interval: str = "1h",
    ) -> None:
        super().__init__("alertmanager", directory)
        config = {
            "route": {
                "receiver": "switchyard",
                "group_by": ["alertname", "cluster"],
                "group_wait": group_wait,
                "group_interval": group_interval,
                "repeat_interval": repeat_interval,
            },
            "receivers": [
                {
                    "name": "switchyard",
                    "webhook_configs": [
                        {
                            "url": receiver_url,
                            "send_resolved": True,
                            "http_config": {"authorization": {"credentials_file": str(token_file)}},
                        }
                    ],
                }
            ],
        }
        self.config = directory / "alertmanager.yml"
        self.config.write_text(yaml.safe_dump(config))

    def start(self) -> None:
        self._start([
            ALERTMANAGER, f"--config.file={self.config}", f"--storage.path={self.directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address=",
        ])  # fmt: skip

    def alerts(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.get("/api/v2/alerts")
        return found
