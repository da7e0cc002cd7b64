"""The `switchyard` command; each sub-command group lives in its own module."""

import sys

from switchyard import temporal
from switchyard.cli import (
    bindings,
    clusters,
    drills,
    evacuate,
    links,
    migrations,
    reports,
    sagas,
    stack,
    status,
    usage,
    verification,
)
from switchyard.cli.base import cli

__all__ = [
    "bindings",
    "cli",
    "clusters",
    "drills",
    "evacuate",
    "links",
    "main",
    "migrations",
    "reports",
    "sagas",
    "stack",
    "status",
    "usage",
    "verification",
]


def main() -> None:
    try:
        cli(prog_name="switchyard")
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if done.code is not None and not isinstance(done.code, int):
            print(done.code, file=sys.stderr)
        temporal.leave(code)
