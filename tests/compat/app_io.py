"""What every compatibility application shares: its arguments, its events, its stop signals.

Each application (one per client library) produces numbered records and consumes them in two groups:
``manual`` commits synchronously after each processed batch, ``auto`` uses the library's default
auto-commit; given ``--codecs``, it produces through one producer per compression codec, record n
through producer n % len(codecs). It writes everything it sees as JSON lines to ``events.jsonl`` in its
directory — each acknowledgement (with ``s``, when the record was sent, but for the Java application's,
whose producer is idempotent) and failed send, each batch received and whether its commit went
through — and stops producing when ``stop-producing`` appears there, stops altogether when ``stop``
does. Once its producer is done it writes ``produced`` with ``n``, the sends it attempted (each must end
in exactly one ``acked`` or ``failed``), and ``unreported``, the records its client gave up waiting for
(librdkafka's ``flush()`` remainder). Each part (``produce``, ``manual``, ``auto``) writes ``ended``
with its name in ``g`` once done. It exits 0 only when every part of it ended cleanly. The Node.js
application (``js/app.js``) speaks the same.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import signal
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

P = TypeVar("P")
VALUE_BYTES = 100
"""A record's value: its number, padded with spaces to this size. A batch of one tiny record is sent
uncompressed by librdkafka and kafka-python whatever the codec (compressing would not make it smaller);
padded, every batch is compressed by every library."""


def value_of(n: int) -> bytes:
    return str(n).ljust(VALUE_BYTES).encode()


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "app", "topic", "dir"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--group", help="the committing group (none: the application only produces)")
    parser.add_argument("--auto-group")
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument(
        "--session-ms", type=int, help="the consumers' session time-out (none: the library's default)"
    )
    parser.add_argument(
        "--group-protocol",
        help="the consumers' group.protocol (none: the library's default); with consumer (KIP-848) the "
        "session time-out is the broker's, and --session-ms is not applied",
    )
    parser.add_argument(
        "--codecs",
        type=lambda names: [name for name in names.split(",") if name],
        default=[],
        help="compression codecs, comma-separated: one producer each (none: one without compression)",
    )
    return parser.parse_args()


def per_codec(args: argparse.Namespace, make: Callable[[dict[str, str]], P], setting: str) -> list[P]:
    """One producer per codec in ``--codecs``, ``make`` given only ``{setting: codec}`` beyond the
    library's defaults, so each codec's batches go to the broker as the library writes them; one
    without compression when none is given. Record n goes through producer n % len(producers)."""
    return [make({setting: codec}) for codec in args.codecs] or [make({})]


def parts(
    args: argparse.Namespace, produce: Callable[[], None], consume: Callable[[str, bool], None]
) -> dict[str, Callable[[], None]]:
    """The application's producer, and its two consumer groups when it was given them."""
    found = {"produce": produce}
    if args.group:
        found["manual"] = lambda: consume(args.group, True)
        found["auto"] = lambda: consume(args.auto_group, False)
    return found


STACKS = "stacks.txt"
"""Where a Python application writes every thread's stack when sent SIGUSR1: what a stalled client was
doing when the test gave up on it."""
DEBUG_LOG = "debug.log"
"""Where an application keeps its client library's debug log (kafka-python's, the last 2 x 16 MB): what
the library logs of each request and answer, for a client that stalls without a word."""


class Events:
    def __init__(self, directory: str) -> None:
        self.dir = Path(directory)
        self._file = (self.dir / "events.jsonl").open("a", buffering=1)
        self._lock = threading.Lock()
        self._stacks = (self.dir / STACKS).open("a")
        faulthandler.register(signal.SIGUSR1, file=self._stacks, all_threads=True)

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


def run_all(events: Events, parts: dict[str, Callable[[], None]]) -> int:
    """Run each part in a thread of that name, each writing ``ended`` when done (of an application
    that does not exit, which part did not); the exit code: 1 if any part raised (written as an
    ``error`` event), else 0 — an exception ending a thread would otherwise leave the process's 0."""
    failed: list[str] = []

    def guarded(name: str, part: Callable[[], None]) -> None:
        try:
            part()
            events("ended", g=name)
        except BaseException as exc:
            failed.append(name)
            events("error", g="app", e=f"{name}: {exc!r}")
            traceback.print_exc()

    threads = [threading.Thread(target=guarded, args=(n, p), name=n) for n, p in parts.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 1 if failed else 0
