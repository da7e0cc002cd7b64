"""What every compatibility application shares: its arguments, its events, its stop signals.

Each application (one per client library) produces numbered records and consumes them in two groups:
``manual`` commits synchronously after each processed batch, ``auto`` uses the library's default
auto-commit. It writes everything it sees as JSON lines to ``events.jsonl`` in its directory — each
acknowledgement and failed send, each batch received and whether its commit went through — and stops
producing when ``stop-producing`` appears there, stops altogether when ``stop`` does. The Node.js
application (``js/app.js``) speaks the same.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "app", "topic", "group", "auto_group", "dir"):
        parser.add_argument(f"--{name.replace('_', '-')}", required=True)
    parser.add_argument("--rate", type=float, default=100.0)
    return parser.parse_args()


class Events:
    def __init__(self, directory: str) -> None:
        self.dir = Path(directory)
        self._file = (self.dir / "events.jsonl").open("a", buffering=1)
        self._lock = threading.Lock()

    def __call__(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"k": kind, "t": time.time(), **fields})
        with self._lock:
            self._file.write(line + "\n")

    def stopping(self, what: str = "stop") -> bool:
        return (self.dir / what).exists()


def paced(rate: float, events: Events) -> Any:
    """0, 1, 2, ... at ``rate`` per second, until ``stop-producing`` appears."""
    interval, n, next_at = 1 / rate, 0, time.monotonic()
    while not events.stopping("stop-producing"):
        wait = next_at - time.monotonic()
        if wait > 0:
            time.sleep(min(wait, 0.05))
            continue
        next_at += interval
        yield n
        n += 1
