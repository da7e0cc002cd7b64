"""Starting sagas and following them, for the CLI and the demo: the policy a saga starts with, its start
(refused when one runs on the same keys), its steps shown as they change, and its result in words.

A saga runs on the workers, durably; starting and following it is all a caller does.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from datetime import timedelta
from typing import Any, cast

from switchyard import temporal
from switchyard.config import Config, SagaKind
from switchyard.errors import SwitchyardError
from switchyard.sagas.failures import reason
from switchyard.sagas.requests import ApprovalPoint, Kind, Policy, Progress
from switchyard.table import render

WORKFLOW_TYPES = {
    Kind.SWITCHOVER: "Switchover",
    Kind.SWITCHBACK: "Switchback",
    Kind.FAILOVER: "Failover",
    Kind.MIGRATION: "TopicMigration",
    Kind.PARTITION_MIGRATION: "PartitionMigration",
    Kind.ORIGIN_RETIREMENT: "RetireOriginTopic",
    Kind.EVACUATION: "ClusterEvacuation",
}
WORKFLOW_TASK_TIMEOUT = timedelta(seconds=2)
"""A worker that dies holding one of the saga's decisions costs this (Temporal's default: 10 s), possibly
with clients held; the sagas' decisions take milliseconds (one slower than this is only tried again)."""
_POLL_S = 0.5
Say = Callable[[str], None]


class SagaFailed(SwitchyardError):
    """The saga ended without doing what was asked (refused, compensated, failed)."""

    exit_code = 8

    def __init__(self, message: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.result = result
        """The saga's result as it ended, when it left one."""


def policy_of(config: Config, kind: Kind, **asked: Any) -> Policy:
    """The configured policy for ``kind``, with what the caller asked for on top."""
    sagas = config.sagas
    policy = Policy(
        approval=ApprovalPoint(sagas.approval.get(cast(SagaKind, kind.value), "none")),
        approval_timeout_s=sagas.approval_timeout_s,
        fence_window_s=sagas.fence_window_s,
        transaction_wait_s=sagas.transaction_wait_s,
        drain_timeout_s=sagas.drain_timeout_s,
        group_sync_timeout_s=sagas.group_sync_timeout_s,
        acks_timeout_s=sagas.acks_timeout_s,
        spark_verify=sagas.spark_verify,
        recovery_wait_s=sagas.recovery_wait_s,
        fault_margin=sagas.fault_margin,
    )
    for name, value in asked.items():
        if value is not None:
            setattr(policy, name, ApprovalPoint(value) if name == "approval" else value)
    return policy


def ui_link(config: Config, workflow_id: str, run_id: str | None = None) -> str:
    """The saga in the Temporal Web UI (one run's history when ``run_id`` is given)."""
    base = f"{config.temporal_ui_url}/namespaces/{config.temporal.namespace}/workflows/{workflow_id}"
    return f"{base}/{run_id}/history" if run_id else base


async def start(
    config: Config, kind: Kind, workflow_id: str, request: object, *, memo: Mapping[str, Any] | None = None
) -> str:
    """Start the saga; return its run id. One already running under the id is named in the refusal.
    ``memo`` is kept with the saga (shown in the Web UI), e.g. the alert that started it."""
    from temporalio.common import WorkflowIDConflictPolicy
    from temporalio.exceptions import WorkflowAlreadyStartedError

    client = await temporal.connect(config)
    try:
        handle = await client.start_workflow(
            WORKFLOW_TYPES[kind], request, id=workflow_id, task_queue=config.temporal.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL, task_timeout=WORKFLOW_TASK_TIMEOUT,
            memo=dict(memo) if memo else None,
        )  # fmt: skip
    except WorkflowAlreadyStartedError:
        running = await client.get_workflow_handle(workflow_id).describe()
        raise SagaFailed(
            f"saga {workflow_id} ({running.workflow_type}) is already running on these keys: "
            f"switchyard sagas show '{workflow_id}'"
        ) from None
    return handle.result_run_id or ""


async def follow(
    config: Config,
    workflow_id: str,
    say: Say,
    *,
    describe: Callable[[dict[str, Any]], list[str]] | None = None,
) -> dict[str, Any]:
    """Say each step as it changes, then the result (in ``describe``'s words: a saga's by default);
    raise SagaFailed (carrying the result) when the saga ended without doing what was asked."""
    describe = describe or describe_saga
    from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

    client = await temporal.connect(config)
    handle = client.get_workflow_handle(workflow_id)
    shown: dict[str, str] = {}
    started = time.monotonic()
    while True:
        described = await handle.describe()
        if described.status is not WorkflowExecutionStatus.RUNNING:
            break
        try:
            progress: Progress = await handle.query("progress", result_type=Progress)
        except Exception:  # not started on a worker yet
            progress = Progress(kind="", keys=[])
        for step_state in progress.steps:
            if shown.get(step_state.name) != step_state.state and step_state.state != "pending":
                shown[step_state.name] = step_state.state
                detail = f" — {step_state.detail}" if step_state.detail else ""
                say(f"  {time.monotonic() - started:6.1f}s  {step_state.name}: {step_state.state}{detail}")
        if progress.awaiting_approval and shown.get("approval") != progress.awaiting_approval:
            shown["approval"] = progress.awaiting_approval
            where = progress.awaiting_approval
            say(f"  waiting for an approval {where}: switchyard sagas approve '{workflow_id}'")
        await asyncio.sleep(_POLL_S)
    try:
        result = await handle.result()
    except WorkflowFailureError as exc:
        cause = exc.cause
        details = getattr(cause, "details", None)
        ended = details[0] if details and isinstance(details[0], dict) else None  # a saga's own result
        for line in describe(ended) if ended else []:
            say(line)
        message = f"saga {workflow_id} ended without the switch: {reason(cause)}"
        raise SagaFailed(message, ended) from None
    found = result if isinstance(result, dict) else asdict(result)
    for line in describe(found):
        say(line)
    return found


def describe_saga(result: dict[str, Any]) -> list[str]:
    """A saga's result, as lines for an operator."""
    if result.get("kind") == Kind.EVACUATION:
        return describe_evacuation(result)
    lines = [f"{result['kind']} {result['outcome']}: {', '.join(result['keys'])}"]
    partition = result["kind"] == Kind.PARTITION_MIGRATION
    if result.get("source") and result.get("target"):
        via = "" if partition else f" (link {result['link']})"
        lines.append(f"  {result['source']} -> {result['target']}{via}")
    if result.get("moved"):
        lines.append(f"  moved with the topic: {', '.join(result['moved'])}")
    if result["outcome"] == "migrated" and partition:
        lines.append(f"  end offset {result.get('end_offset')}; RTO {result['rto_ms'] / 1000:.2f}s")
    elif result["outcome"] in ("switched", "migrated"):
        lines.append(
            f"  RTO {result['rto_ms'] / 1000:.2f}s, clients held {result['pause_ms'] / 1000:.2f}s; "
            f"{result['partitions']} partitions, {result['records_copied']} records copied, "
            f"{result['groups_synced']} group offsets in step; verdict {result['verdict'] or '-'}"
        )
        if result.get("reverse_link"):
            lines.append(f"  reverse link {result['reverse_link']} copies back for the switch back")
    for loss in result.get("rpo") or []:
        lost = max(0, loss["last_seen_end"] - loss["copied_to"])
        lines.append(
            f"  RPO {loss['topic']}[{loss['partition']}]: {lost} records (copied to {loss['copied_to']})"
        )
    if result.get("lost_window_records") is not None:
        lines.append(f"  lost window measured: {result['lost_window_records']} records")
    lines += [f"  {approval}" for approval in result.get("approvals") or []]
    if result.get("detail"):
        lines.append(f"  {result['detail']}")
    return lines


def describe_evacuation(result: dict[str, Any]) -> list[str]:
    """An evacuation's result (its report), as lines for an operator."""
    lines = [f"evacuation {result['outcome']}: {result['source']} -> {result['target']}"]
    rows = [
        (b["number"], len(b["topics"]), ", ".join(b["apps"]), b["outcome"], f"{b['pause_ms'] / 1000:.2f}",
         f"{b['duration_ms'] / 1000:.1f}", b["records_copied"], b["verdict"] or "-")
        for b in result.get("batches") or []
    ]  # fmt: skip
    if rows:
        headers = ("BATCH", "TOPICS", "APPLICATIONS", "OUTCOME", "HELD S", "TOOK S", "COPIED", "VERDICT")
        lines += render(headers, rows).splitlines()
    switched = [b for b in result.get("batches") or [] if b["outcome"] == "switched"]
    if switched:
        held = [b["pause_ms"] for b in switched]
        lines.append(
            f"  clients held p50 {statistics.median(held) / 1000:.2f}s, max {max(held) / 1000:.2f}s over "
            f"{len(switched)} batches; RPO 0 (planned switches); took {result['duration_ms'] / 1000:.0f}s"
        )
    if result.get("unused"):
        lines.append(f"  no application seen: {_names(result['unused'])}")
    lines += [f"  {approval}" for approval in result.get("approvals") or []]
    if result.get("detail"):
        lines.append(f"  {result['detail']}")
    return lines


def _names(names: list[str]) -> str:
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
