"""Ports for services a test starts, chosen so that they cannot collide.

A port found free by binding to port 0 and closing again comes from the kernel's ephemeral range, which
the kernel also hands out as the local port of every outgoing connection: between the choice and the
service binding it, a client connection elsewhere can take it, and the service fails to start. Ports
here come from below that range instead, where the kernel never picks one by itself, and each is
reserved with a lock file held for the rest of the test session, so that parallel runs on one machine
never choose the same one.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
from pathlib import Path

_LOCKS = Path("/tmp/switchyard-test-ports")
_LOWEST = 10_000
_held: dict[int, int] = {}
"""Reserved port -> the open lock file descriptor that holds it (for this process's lifetime)."""


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _reserve(port: int) -> bool:
    if port in _held:
        return False
    _LOCKS.mkdir(exist_ok=True)
    fd = os.open(_LOCKS / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    if not _bindable(port):
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        return False
    _held[port] = fd
    return True


def reserve_block(count: int) -> int:
    """The first of ``count`` consecutive free ports, all reserved for this test session."""
    highest = _ephemeral_low() - count
    for _ in range(500):
        start = random.randrange(_LOWEST, highest)
        taken: list[int] = []
        for port in range(start, start + count):
            if not _reserve(port):
                break
            taken.append(port)
        else:
            return start
        for port in taken:
            release(port)
    raise RuntimeError(f"no block of {count} free ports below {highest + count}")


def reserve(count: int) -> list[int]:
    """``count`` free ports (not necessarily consecutive), reserved for this test session."""
    return [reserve_block(1) for _ in range(count)]


def release(port: int) -> None:
    fd = _held.pop(port, None)
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def unused_port() -> int:
    """A port nothing listens on, for tests of what happens when nothing answers."""
    return reserve(1)[0]
