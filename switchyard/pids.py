"""Processes of this host by pid, read from /proc: whether one lives, and since when (a pid is reused)."""

from __future__ import annotations

import os
from pathlib import Path


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces; fields after it are plain.
    fields = stat.rpartition(")")[2].split()
    return int(fields[19])


def is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] == "Z"


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie; reaps it if it is our own child."""
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    return start_ticks(pid) is not None and not is_zombie(pid)
