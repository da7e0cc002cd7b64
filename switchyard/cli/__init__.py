"""The `switchyard` command; each sub-command group lives in its own module."""

from switchyard.cli import bindings, clusters, links, stack, verification
from switchyard.cli.base import cli

__all__ = ["bindings", "cli", "clusters", "links", "main", "stack", "verification"]


def main() -> None:
    cli(prog_name="switchyard")
