"""The TCP connections a process holds, read from /proc: which ports a client process is connected to."""

from __future__ import annotations

import os
from pathlib import Path


def connected_ports(pid: int) -> set[int]:
    """The remote ports of the established TCP connections process ``pid`` holds (empty once it ended)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").glob("*"):
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and int(fields[9]) in inodes:  # ESTABLISHED
                ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports
