"""A real saga worker (``switchyard worker`` as its supervisor runs it) that SIGKILLs itself the moment one
step has done its work and recorded it, before its answer reaches the saga: a crash at the one moment a
random kill rarely hits. Run as ``python -m tests.helpers.dying_worker STEP --config FILE worker
--supervised``."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from activities import recorded
from switchyard.cli import main


def die_after(step: str) -> None:
    record = recorded.record_attempt

    def record_then_die(deps: Any, name: str, started: Any, **outcome: Any) -> None:
        record(deps, name, started, **outcome)
        if name == step and outcome["outcome"] == "ok":
            os.kill(os.getpid(), signal.SIGKILL)

    recorded.record_attempt = record_then_die  # type: ignore[assignment]


if __name__ == "__main__":
    die_after(sys.argv.pop(1))
    main()
