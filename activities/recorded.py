"""Saga steps as activities: Switchyard's errors mapped (:mod:`activities.errors`), a heartbeat while
each runs (:mod:`activities.pulse`), and each attempt of each step written to the ledger as it ends —
outcome, detail and figures — so a saga killed halfway leaves its trail."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from temporalio import activity

from activities.deps import Deps
from activities.errors import mapped
from activities.pulse import pulsing
from switchyard.errors import FlipLanded
from switchyard.model import now
from switchyard.sagas.ids import step_request_id

log = logging.getLogger(__name__)
Request = TypeVar("Request")
Result = TypeVar("Result")
_LONGEST_LIST = 20


class HasDeps(Protocol):
    deps: Deps


def step(
    name: str, *, recorded: bool = True, held: bool = False
) -> Callable[[Callable[[Any, Request], Result]], Callable[[Any, Request], Result]]:
    """Make a method of an activities class the saga step ``name`` (``recorded``: its attempts written
    to the ledger, which only a saga's steps are: a scheduled check has no saga run to belong to).

    ``held``: a step a switch runs on its own worker while clients are held, before its flip. Those
    steps reach the saga's history together, when the worker next reports; a worker killed just after
    its flip leaves some unheard, and the next worker runs them again, after the flip. Then the step
    must not run (a copy check fails on what clients wrote since, a group sync could move their
    offsets back): it raises FlipLanded, and the saga goes forward from the flip."""

    def decorate(work: Callable[[Any, Request], Result]) -> Callable[[Any, Request], Result]:
        @functools.wraps(work)
        def run(self: HasDeps, request: Request) -> Result:
            started = now()
            try:
                with mapped(), pulsing():
                    if held and activity.info().is_local:
                        _before_the_flip(self.deps)
                    result = work(self, request)
            except BaseException as exc:
                if recorded:
                    detail = f"{type(exc).__name__}: {exc}"
                    record_attempt(self.deps, name, started, outcome="failed", detail=detail, found={})
                raise
            if recorded:
                record_attempt(self.deps, name, started, outcome="ok", detail="", found=figures(result))
            return result

        return activity.defn(name=name)(run)

    return decorate


def request_id(step_name: str) -> str:
    """This run's request id for a step's routing change (the same on every retry of the step)."""
    info = activity.info()
    return step_request_id(info.workflow_run_id or info.workflow_id or info.activity_id, step_name)


def _before_the_flip(deps: Deps) -> None:
    flipped = deps.store.committed_epoch(request_id("flip"))
    if flipped is not None:
        raise FlipLanded(f"this saga's flip landed at epoch {flipped}; asked again after it")


def figures(result: object) -> dict[str, Any]:
    """What a step's result says, small enough for the ledger: long lists are counted, not copied."""
    if not dataclasses.is_dataclass(result) or isinstance(result, type):
        return {}
    out: dict[str, Any] = {}
    for key, value in dataclasses.asdict(result).items():
        out[key] = f"{len(value)} items" if isinstance(value, list) and len(value) > _LONGEST_LIST else value
    return out


def record_attempt(
    deps: Deps, name: str, started: Any, *, outcome: str, detail: str, found: dict[str, Any]
) -> None:
    info = activity.info()
    if info.workflow_run_id is None:
        return
    try:
        deps.ledger.saga_step(
            info.workflow_run_id, name, attempt=info.attempt, started_at=started, ended_at=now(),
            outcome=outcome, detail=detail, figures=found,
        )  # fmt: skip
    except Exception:
        if outcome == "ok":
            raise  # retried: the step is idempotent, and its trail must not have a hole
        log.exception("step %s: its failure could not be recorded", name)
