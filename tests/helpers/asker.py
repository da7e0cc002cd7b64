"""A worker's kept AdminClients (``switchyard.admins``) in a process of their own, asked for a group's
committed offsets line by line: ``python -m tests.helpers.asker BOOTSTRAP GROUP``, then ``TIMEOUT_S`` per
line; each answer a JSON line (``{"offsets": [[topic, partition, offset], …]}`` or ``{"error": name}``).

Apart from the test's process because librdkafka has killed processes that asked a group's offsets
(confluentinc/librdkafka#4605, #5040; ``switchyard.offset_fetch`` asks them itself since): the worker is
supervised against that, a test process is not, and a test tells a death by ``Asker.restarts``."""

from __future__ import annotations

import json
import subprocess
import sys

from switchyard.admins import Admins
from switchyard.mirror.groups import committed_offsets


class Asker:
    """The asking process, driven from a test; started again if it dies (as the worker's supervisor
    would), the count kept in ``restarts``."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.argv = [sys.executable, "-m", "tests.helpers.asker", bootstrap, group]
        self.restarts = 0
        self._process = self._start()

    def ask(self, timeout_s: float = 10) -> dict[tuple[str, int], int]:
        """The group's committed offsets; ``RuntimeError`` naming what the client said otherwise."""
        if self._process.poll() is not None:
            self.restarts += 1
            self._process = self._start()
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        self._process.stdin.write(f"{timeout_s}\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the asking process died ({self._process.wait()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return {(t, p): o for t, p, o in answer["offsets"]}

    def close(self) -> None:
        self._process.kill()
        self._process.wait()

    def _start(self) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def main() -> None:
    bootstrap, group = sys.argv[1], sys.argv[2]
    admins = Admins(lambda _: bootstrap)
    for line in sys.stdin:
        try:
            with admins.asking("cluster") as admin:
                found = committed_offsets(admin, group, float(line))
            answer: dict[str, object] = {"offsets": [[t, p, o] for (t, p), o in sorted(found.items())]}
        except Exception as exc:  # what the client said, for the test to judge
            answer = {"error": type(exc).__name__}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
