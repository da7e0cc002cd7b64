"""A switch run as a saga of its own from inside another (a drill's, an evacuation's batch): the real
Switchover or Switchback workflow as a child, so it does exactly what an operator's switch would."""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from switchyard.sagas.ids import saga_id
    from switchyard.sagas.requests import Kind, SagaResult, SwitchRequest

CHILD_TASK_TIMEOUT = timedelta(seconds=2)
"""As every saga is started with (``launch.WORKFLOW_TASK_TIMEOUT``)."""


async def switch(kind: Kind, asked: SwitchRequest) -> dict[str, Any]:
    """Run the switch (its id the keys', as any switch of them) and return its result as a dict, whether
    it switched or not (a saga that failed carries its result in its failure's details), with the
    saga's ``saga_id`` and first ``run_id``."""
    handle = await workflow.start_child_workflow(
        "Switchover" if kind is Kind.SWITCHOVER else "Switchback", asked, id=saga_id(asked.keys),
        result_type=SagaResult, task_timeout=CHILD_TASK_TIMEOUT,
        parent_close_policy=ParentClosePolicy.ABANDON,  # a switch under way finishes on its own
    )  # fmt: skip
    try:
        ended: dict[str, Any] = asdict(await handle)
    except ChildWorkflowError as exc:
        details = getattr(exc.cause, "details", None)
        if not details or not isinstance(details[0], dict):
            raise
        ended = details[0]
    ended["saga_id"], ended["run_id"] = handle.id, handle.first_execution_run_id or ""
    return ended
