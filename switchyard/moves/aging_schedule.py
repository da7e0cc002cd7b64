"""The Temporal Schedule that runs the partition migrations' aging check (``MigrationAging``) every
``sagas.aging_every_s``: kept by every worker at its start — created, brought in line with the
configuration, or removed when the interval is 0 — so no operator has to remember it."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import TYPE_CHECKING

from switchyard.config import Config
from switchyard.sagas.ids import aging_schedule_id
from switchyard.sagas.requests import AgingRequest

if TYPE_CHECKING:
    from temporalio.client import Client, Schedule, ScheduleUpdate, ScheduleUpdateInput

WORKFLOW = "MigrationAging"
CHECK_LONGEST = timedelta(minutes=30)


def schedule_of(config: Config) -> Schedule:
    from temporalio.client import (
        Schedule,
        ScheduleActionStartWorkflow,
        ScheduleIntervalSpec,
        ScheduleOverlapPolicy,
        SchedulePolicy,
        ScheduleSpec,
        ScheduleState,
    )

    every = timedelta(seconds=config.sagas.aging_every_s)
    schedule_id = aging_schedule_id(config.temporal.task_queue)
    action = ScheduleActionStartWorkflow(
        WORKFLOW, AgingRequest(config.sagas.approval_timeout_s), id=schedule_id,
        task_queue=config.temporal.task_queue, execution_timeout=CHECK_LONGEST,
    )  # fmt: skip
    note = "partition migrations: record returned origins' ends, age, find origin topics to retire"
    return Schedule(
        action,
        ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
        SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
        ScheduleState(note=note),
    )


async def keep(client: Client, config: Config) -> str:
    """Make the aging schedule what the configuration says; say what was done."""
    from temporalio.client import ScheduleAlreadyRunningError, ScheduleUpdate
    from temporalio.service import RPCError, RPCStatusCode

    schedule_id = aging_schedule_id(config.temporal.task_queue)
    handle = client.get_schedule_handle(schedule_id)
    if config.sagas.aging_every_s == 0:
        try:
            await handle.delete()
        except RPCError as exc:
            if exc.status is not RPCStatusCode.NOT_FOUND:
                raise
            return "aging check not scheduled (sagas.aging_every_s is 0)"
        return "aging check schedule removed (sagas.aging_every_s is 0)"
    wanted = schedule_of(config)
    try:
        await client.create_schedule(schedule_id, wanted)
    except ScheduleAlreadyRunningError:

        def update(given: ScheduleUpdateInput) -> ScheduleUpdate:
            """What the configuration says, its state (paused by an operator, its note) kept."""
            state = given.description.schedule.state
            return ScheduleUpdate(schedule=dataclasses.replace(wanted, state=state))

        await handle.update(update)
        return f"aging check every {config.sagas.aging_every_s:g}s (schedule {schedule_id} updated)"
    return f"aging check every {config.sagas.aging_every_s:g}s (schedule {schedule_id} created)"
