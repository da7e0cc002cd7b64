"""Drills on Temporal Schedules: one schedule per drill, firing the ``Drill`` workflow; a firing while the
last run is still going is skipped (overlap SKIP), and one missed while Temporal was down runs late only
within the catch-up window.

The schedule holds the whole drill request (link, rate, objectives, policy), so what a drill does is fixed
when it is scheduled and shown by ``drill list``; re-schedule it to change it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from switchyard import temporal
from switchyard.config import Config
from switchyard.errors import BindingRefused, TemporalRefused
from switchyard.sagas.drills import DrillRequest

if TYPE_CHECKING:
    from temporalio.client import ScheduleHandle

PREFIX = "switchyard-drill-"
NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
WORKFLOW = "Drill"
DRILL_TASK_TIMEOUT = timedelta(seconds=2)
DRILL_LONGEST = timedelta(hours=3)
"""A run still going after this is ended by Temporal: a hung drill would have every later firing skipped.
Its switches, child workflows of their own, finish on their own."""
T = TypeVar("T")


class DrillNotFound(BindingRefused):
    """No drill of that name is scheduled."""


def check_name(name: str) -> str:
    """ValueError saying what a drill's name may be."""
    if not NAME.fullmatch(name):
        raise ValueError(
            f"drill name {name!r}: lower-case letters, digits and '-', 1 to 40 of them, starting with a "
            "letter or digit (it names the drill's AppID, topics and schedule)"
        )
    return name


def schedule_id(name: str) -> str:
    return f"{PREFIX}{name}"


@dataclass(frozen=True)
class ScheduledDrill:
    name: str
    every: timedelta | None
    offset: timedelta | None
    paused: bool
    note: str
    running: list[str]
    """Workflow ids of the drill's runs going on now."""
    next_at: datetime | None
    fired: int
    skipped: int
    """Firings skipped because the last run was still going."""
    last: str
    """The workflow id of the latest run started, "" before the first."""
    request: DrillRequest | None


async def create(
    config: Config, request: DrillRequest, *, every: timedelta | None, offset: timedelta | None
) -> None:
    """Schedule the drill (``every`` None: only when run by hand); refused if one of the name exists."""
    from temporalio.client import (
        Schedule,
        ScheduleActionStartWorkflow,
        ScheduleAlreadyRunningError,
        ScheduleIntervalSpec,
        ScheduleOverlapPolicy,
        SchedulePolicy,
        ScheduleSpec,
        ScheduleState,
    )

    client = await temporal.connect(config)
    spec = ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every, offset=offset)] if every else [])
    action = ScheduleActionStartWorkflow(
        WORKFLOW, request, id=schedule_id(request.name), task_queue=config.temporal.task_queue,
        task_timeout=DRILL_TASK_TIMEOUT, execution_timeout=DRILL_LONGEST,
    )  # fmt: skip
    policy = SchedulePolicy(
        overlap=ScheduleOverlapPolicy.SKIP, catchup_window=timedelta(seconds=config.drills.catchup_window_s)
    )
    note = f"drill {request.name}: {request.link}, by {request.actor}"
    try:
        await _calling(
            client.create_schedule(
                schedule_id(request.name), Schedule(action, spec, policy, ScheduleState(note=note))
            ),
        )
    except ScheduleAlreadyRunningError:
        raise BindingRefused(
            f"drill {request.name} is scheduled already: switchyard drill delete {request.name} first"
        ) from None


async def trigger(config: Config, name: str) -> str:
    """Fire the drill now; return its workflow id. Refused while a run of it is going (as the schedule
    would skip it)."""
    handle = await _handle(config, name)
    before = await _described(handle, name)
    if before.running:
        raise BindingRefused(f"drill {name} is running already: {', '.join(before.running)}")
    await _calling(handle.trigger())
    for _ in range(100):  # the schedule starts the run within a moment
        after = await _described(handle, name)
        if after.running:
            return after.running[0]
        if after.fired > before.fired and after.last:  # it ran and ended already
            return after.last
        await asyncio.sleep(0.1)
    raise BindingRefused(f"drill {name} was triggered, but no run of it started: switchyard drill list")


async def listed(config: Config) -> list[ScheduledDrill]:
    client = await temporal.connect(config)
    drills = []
    async for entry in await _calling(client.list_schedules()):
        if entry.id.startswith(PREFIX):
            name = entry.id.removeprefix(PREFIX)
            try:
                drills.append(await _described(client.get_schedule_handle(entry.id), name))
            except DrillNotFound:  # deleted since it was listed
                continue
    return sorted(drills, key=lambda d: d.name)


async def describe(config: Config, name: str) -> ScheduledDrill:
    return await _described(await _handle(config, name), name)


async def pause(config: Config, name: str, *, note: str, resume: bool = False) -> None:
    handle = await _handle(config, name)
    await _calling(handle.unpause(note=note) if resume else handle.pause(note=note))


async def delete(config: Config, name: str) -> None:
    """Delete the schedule; a run going on finishes (and tidies up) on its own."""
    await _calling((await _handle(config, name)).delete())


async def _calling(call: Awaitable[T]) -> T:
    """A call to Temporal; its refusals (an argument, a permission) as errors that name them."""
    from temporalio.service import RPCError

    try:
        return await call
    except RPCError as exc:
        raise _refused(exc) from None


def _refused(exc: Exception) -> TemporalRefused:
    status = getattr(exc, "status", None)
    return TemporalRefused(f"Temporal refused: {status.name + ': ' if status else ''}{exc}")


async def _handle(config: Config, name: str) -> ScheduleHandle:
    client = await temporal.connect(config)
    handle = client.get_schedule_handle(schedule_id(check_name(name)))
    await _described(handle, name)
    return handle


async def _described(handle: ScheduleHandle, name: str) -> ScheduledDrill:
    from temporalio.client import ScheduleActionExecutionStartWorkflow, ScheduleActionStartWorkflow
    from temporalio.service import RPCError, RPCStatusCode

    try:
        described = await handle.describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise DrillNotFound(f"no drill {name!r} is scheduled: switchyard drill list") from None
        raise _refused(exc) from None
    schedule, info = described.schedule, described.info
    interval = schedule.spec.intervals[0] if schedule.spec.intervals else None
    request = None
    action = schedule.action
    if isinstance(action, ScheduleActionStartWorkflow) and action.args:
        request = await _request_of(handle, action.args[0])
    return ScheduledDrill(
        name=name,
        every=interval.every if interval else None,
        offset=interval.offset if interval else None,
        paused=schedule.state.paused,
        note=schedule.state.note or "",
        running=[
            a.workflow_id for a in info.running_actions if isinstance(a, ScheduleActionExecutionStartWorkflow)
        ],
        next_at=info.next_action_times[0] if info.next_action_times else None,
        fired=info.num_actions,
        skipped=info.num_actions_skipped_overlap,
        last=next(
            (
                a.action.workflow_id
                for a in reversed(info.recent_actions)
                if isinstance(a.action, ScheduleActionExecutionStartWorkflow)
            ),
            "",
        ),
        request=request,
    )


async def _request_of(handle: ScheduleHandle, arg: object) -> DrillRequest | None:
    """The schedule's drill request, decoded (a schedule described comes back with raw payloads)."""
    from temporalio.api.common.v1 import Payload

    if not isinstance(arg, Payload):
        return arg if isinstance(arg, DrillRequest) else None
    try:
        decoded = await temporal.data_converter().decode([arg], [DrillRequest])
    except Exception:  # a schedule made by another version: shown without its request
        return None
    found = decoded[0]
    return found if isinstance(found, DrillRequest) else None
