"""What a soak watches of the processes it runs: memory, open files, threads and CPU time sampled every
few seconds from the kernel's accounting, ZooKeeper's watch count, and the judgement of each series."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    t: float
    """Seconds since the soak began."""
    name: str
    pid: int
    rss_mib: float
    fds: int
    threads: int
    cpu_s: float
    """User and system CPU seconds since the process began."""


@dataclass
class Instance:
    """One process's life (a restart begins another)."""

    name: str
    pid: int
    samples: list[Sample] = field(default_factory=list)
    quiet: list[Sample] = field(default_factory=list)
    """Samples taken just before each switch, when nothing else moves: the leak checks compare these."""
    judged: bool = True
    """Whether its series are judged for leaks (else watched only: the brokers, the applications)."""

    def cpu_percent(self) -> list[float]:
        """Its CPU use between consecutive samples, in percent of one core."""
        pairs = zip(self.samples, self.samples[1:], strict=False)
        return [100 * (b.cpu_s - a.cpu_s) / (b.t - a.t) for a, b in pairs if b.t > a.t]

    @property
    def lived_s(self) -> float:
        return self.samples[-1].t - self.samples[0].t if self.samples else 0.0

    def rss_slope_mib_per_h(self, *, after_s: float) -> float | None:
        """The least-squares slope of its memory after ``after_s`` of its life (None: too few samples)."""
        begin = self.samples[0].t + after_s if self.samples else 0.0
        points = [(s.t, s.rss_mib) for s in self.samples if s.t >= begin]
        if len(points) < 5:
            return None
        n = len(points)
        mean_t, mean_r = sum(t for t, _ in points) / n, sum(r for _, r in points) / n
        spread = sum((t - mean_t) ** 2 for t, _ in points)
        if spread == 0:
            return None
        return sum((t - mean_t) * (r - mean_r) for t, r in points) / spread * 3600


def read_process(name: str, pid: int, t: float) -> Sample | None:
    """A sample of process ``pid`` from /proc (None: it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if "VmRSS" not in fields:  # exiting: a zombie keeps its status, without memory
        return None
    rss_kib = int(fields["VmRSS"].split()[0])
    ticks = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    cpu_s = (int(ticks[11]) + int(ticks[12])) / _TICKS_PER_S  # utime, stime
    return Sample(t, name, pid, rss_kib / 1024, fds, int(fields["Threads"]), cpu_s)


def zk_watches(connect: str) -> int:
    """ZooKeeper's count of watches set (``mntr``)."""
    host, _, port = connect.split(",", maxsplit=1)[0].partition(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"mntr")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    for line in data.decode().splitlines():
        key, _, value = line.partition("\t")
        if key == "zk_watch_count":
            return int(value)
    raise AssertionError(f"ZooKeeper's mntr names no zk_watch_count: {data[:200]!r}")


class Sampler:
    """Samples every process ``pids`` names (name -> its pid now, None while it is down) every
    ``every_s`` in a thread of its own, and ZooKeeper's watches with them; ``watched`` names processes
    sampled the same way but not judged for leaks."""

    def __init__(
        self,
        pids: dict[str, Callable[[], int | None]],
        zk_connect: str,
        *,
        watched: dict[str, Callable[[], int | None]] | None = None,
        every_s: float = 5.0,
    ) -> None:
        self.pids, self.zk_connect, self.every_s = pids, zk_connect, every_s
        self.watched = watched or {}
        self.began = time.monotonic()
        self.instances: list[Instance] = []
        self.watches: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def now(self) -> float:
        return time.monotonic() - self.began

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def sample(self, *, quiet: bool = False) -> None:
        """Sample every process now (``quiet``: also as a leak-check point)."""
        t = self.now()
        with self._lock:
            for name, pid_of in (self.pids | self.watched).items():
                pid = pid_of()
                found = read_process(name, pid, t) if pid else None
                if found is None:
                    continue
                instance = self._instance(name, found.pid, judged=name in self.pids)
                instance.samples.append(found)
                if quiet:
                    instance.quiet.append(found)
            self.watches.append((t, zk_watches(self.zk_connect)))

    def _instance(self, name: str, pid: int, *, judged: bool) -> Instance:
        for instance in reversed(self.instances):
            if instance.name == name and instance.pid == pid:
                return instance
        instance = Instance(name, pid, judged=judged)
        self.instances.append(instance)
        return instance

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()
