"""Things the tests compile (the Java applications, the C load generator), built once per version of
their inputs and kept under ``.state``: one process builds, the suite's others wait for it."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

STATE = Path(__file__).resolve().parents[2] / ".state"


def built_once(kind: str, name: str, inputs: bytes, build: Callable[[Path], None]) -> Path:
    """The folder ``.state/<kind>/<name>-<digest of inputs>``, made by ``build`` (given an empty folder
    to fill) if it is not there yet. Built beside it and renamed into place whole: a build cut short
    leaves nothing that looks done."""
    folder = STATE / kind
    done = folder / f"{name}-{hashlib.sha256(inputs).hexdigest()[:12]}"
    if done.exists():
        return done
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            building = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=folder))
            try:
                build(building)
                building.rename(done)
            finally:
                shutil.rmtree(building, ignore_errors=True)
    return done
