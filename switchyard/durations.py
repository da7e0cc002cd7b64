"""Durations as operators type them: ``90s``, ``15m``, ``6h``, ``30d`` (or several: ``1h30m``)."""

from __future__ import annotations

import re
from datetime import timedelta

_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """ValueError naming the accepted forms for anything else (and for zero)."""
    compact = text.strip().lower()
    parts = _PART.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise ValueError(f"{text!r} is not a duration: a number with s, m, h or d (90s, 15m, 6h, 30d, 1h30m)")
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"{text!r}: a duration must be longer than zero")
    return timedelta(seconds=seconds)


def parse_clock(text: str) -> timedelta:
    """``HH:MM`` (UTC) as the time since midnight."""
    found = re.fullmatch(r"([01]?\d|2[0-3]):([0-5]\d)", text.strip())
    if not found:
        raise ValueError(f"{text!r} is not a time of day: HH:MM, in UTC (02:30)")
    return timedelta(hours=int(found[1]), minutes=int(found[2]))


def format_duration(duration: timedelta) -> str:
    """As :func:`parse_duration` reads it back: ``1d``, ``1h30m``, ``90s`` becomes ``1m30s``."""
    left, parts = int(duration.total_seconds()), []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts) or "0s"


def format_clock(offset: timedelta) -> str:
    """A time since midnight as ``HH:MM``."""
    minutes = int(offset.total_seconds()) // 60
    return f"{minutes // 60:02d}:{minutes % 60:02d}"
