"""The `switchyard` command; each sub-command group lives in its own module, imported when it is run
(:data:`switchyard.cli.base.SUBCOMMANDS`)."""

import sys

from switchyard import temporal
from switchyard.cli.base import cli

__all__ = ["cli", "main"]


def main() -> None:
    # kio (the gateway's protocol types) registers Hypothesis strategies when it can import Hypothesis,
    # 0.4 s of every gateway start where the test tools are installed; no process of this command uses it
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    try:
        cli(prog_name="switchyard")
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if done.code is not None and not isinstance(done.code, int):
            print(done.code, file=sys.stderr)
        temporal.leave(code)
