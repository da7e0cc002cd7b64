"""Cluster evacuation: every topic of one cluster, and every application using them, moves to another
cluster in batches, no client reconfigured — how an estate on Apache Kafka 3.9 with ZooKeeper moves to a
4.x cluster in KRaft mode (docs/runbooks/cluster-move.md).

plan → copy every topic (one link) → per batch: paused? → approval? → the batch's switchover (a saga of
its own, a child workflow, which splits the batch's topics off the link and promotes them) → … →
approval → retire the source's topics and the links

Between two batches the evacuation can be paused (signal ``pause``; ``resume`` goes on) and the last
batch switched rolled back (signal ``roll_back``: its applications switched back along its reverse link,
then the evacuation pauses). A batch whose switch did not switch (it compensated: its applications are
where they were) pauses the evacuation too; resumed, the batch is tried again. A worker or cluster
restart between batches is Temporal's to survive: the saga goes on from the batch it was at. Nothing on
the source is deleted without an approval; a rejection, or no answer in time, keeps the source's topics,
copied back by each batch's reverse link, so any batch can still be switched back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, replace
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError, WorkflowAlreadyStartedError

from workflows.base import SagaAbandoned, SagaWorkflow, millis
from workflows.children import switch

with workflow.unsafe.imports_passed_through():
    from switchyard.sagas import evacuations
    from switchyard.sagas.evacuations import (
        EVACUATION_KIND,
        BatchOutcome,
        CopyClusterRequest,
        EvacuationBatch,
        EvacuationPlan,
        EvacuationPlanRequest,
        EvacuationRequest,
        EvacuationResult,
        RetiredEvacuated,
        RetireEvacuatedRequest,
        evacuation_link,
    )
    from switchyard.sagas.failures import reason
    from switchyard.sagas.requests import ApprovalPoint, Kind, SwitchRequest
    from switchyard.sagas.steps import MigrationLink

STEPS = ["plan", "copy topics", "retire source"]
CAUGHT_UP_S = 5.0
"""The copy keeps up when every partition was fully copied within this many seconds."""
SWITCHED, ROLLED_BACK, NOT_STARTED = "switched", "rolled back", "not started"


@workflow.defn(name="ClusterEvacuation")
class ClusterEvacuation(SagaWorkflow):
    def __init__(self) -> None:
        super().__init__()
        self._paused = False
        self._roll_backs = 0
        self._outcomes: list[BatchOutcome] = []
        self._started = datetime.min
        self._switches: list[str] = []

    @workflow.signal
    def pause(self) -> None:
        """Stop before the next batch (a batch under way finishes)."""
        self._paused = True

    @workflow.signal
    def resume(self) -> None:
        self._paused = False

    @workflow.signal
    def roll_back(self) -> None:
        """Switch the last batch switched back to the source, then pause (each signal one batch more)."""
        self._roll_backs += 1

    @workflow.query
    def batches(self) -> list[BatchOutcome]:
        """Each batch as far as it got."""
        return self._outcomes

    @workflow.run
    async def run(self, request: EvacuationRequest) -> EvacuationResult:
        saga, self._started = workflow.info().workflow_id, workflow.now()
        link = evacuation_link(request.source, request.target)
        self._begin(EVACUATION_KIND, [], STEPS)
        self._set_route(request.source, request.target, link)
        why = f"evacuate {request.source} to {request.target}: {request.reason}".strip(": ")
        await self._record("started", actor=request.actor, reason=why)
        result = EvacuationResult(saga, request.source, request.target, "refused")
        asked = EvacuationPlanRequest(
            saga, request.source, request.target, link, request.batch_topics, request.order,
            request.batches, request.active_within_s, request.watch_s,
        )  # fmt: skip
        plan = await self._step(
            "plan", evacuations.PLAN_EVACUATION, asked, EvacuationPlan,
            timeout_s=request.watch_s + 300, heartbeat_s=30, give_up_s=request.watch_s + 900,
        )  # fmt: skip
        if plan.cannot_move:
            result.detail = "cannot move: " + "; ".join(plan.cannot_move)
            await self._end(result, fail="EvacuationRefused")
        self._set_keys(sorted({k for b in plan.batches for k in b.keys}))
        self._outcomes = [BatchOutcome(b.number, b.topics, b.apps, NOT_STARTED) for b in plan.batches]
        result.batches, result.unused = self._outcomes, plan.unused
        for batch in plan.batches:
            self._step_after(
                "copy topics" if batch.number == 1 else _name(batch.number - 1), _name(batch.number)
            )
        copy = CopyClusterRequest(saga, request.source, request.target, link, plan.topics, CAUGHT_UP_S,
                                  request.copy_timeout_s)  # fmt: skip
        try:
            await self._step(
                "copy topics", evacuations.COPY_CLUSTER, copy, MigrationLink,
                timeout_s=request.copy_timeout_s + 60, heartbeat_s=30, give_up_s=request.copy_timeout_s + 600,
            )  # fmt: skip
        except Exception as exc:  # not the saga's cancellation: that ends it as cancelled
            result.outcome = "failed"
            result.detail = (
                f"the copy did not catch up: {reason(exc)}; no client was moved ({link} keeps copying)"
            )
            await self._end(result, fail="EvacuationAbandoned")
        switched: dict[int, dict[str, Any]] = {}
        for batch in plan.batches:
            while self._outcomes[batch.number - 1].outcome != SWITCHED:
                where = f"before batch {batch.number} of {len(plan.batches)}"
                refused = await self._gate(
                    _fixed(where if request.approve_batches else None), request, switched
                )
                if refused is not None:
                    result.outcome = "stopped"
                    result.detail = f"{refused}: the batches before it moved, the rest did not"
                    await self._end(result, fail="EvacuationStopped")
                ended = await self._switch(Kind.SWITCHOVER, batch, batch.keys, link, request)
                if ended["outcome"] == SWITCHED:
                    switched[batch.number] = ended
                else:
                    self._paused = True  # resumed, the batch is tried again
        await self._gate(_fixed(None), request, switched)
        await self._retire(request, result, plan, switched, link)
        result.outcome = "evacuated" if len(switched) == len(plan.batches) else ROLLED_BACK
        return await self._end(result)

    async def _gate(
        self, where: Callable[[], str | None], request: EvacuationRequest, switched: dict[int, dict[str, Any]]
    ) -> str | None:
        """Where the evacuation stops between batches: each roll-back asked for is done (then it pauses);
        paused, it waits to be resumed; where ``where()`` names an approval, it waits for it — a roll-back or
        a pause asked for meanwhile goes first, and the approval is asked for again after (a decision sent
        with them is for the question before). None once it may go on; else why not (a rejection, or no
        approval in time)."""
        timeout_s = request.policy.approval_timeout_s
        while True:
            if self._roll_backs:
                self._roll_backs -= 1
                await self._roll_back_last(request, switched)
                self._paused = True
                continue
            if self._paused:
                self._phase(
                    "paused", "between batches: signal `resume` to go on, `roll_back` for the last back"
                )
                await workflow.wait_condition(lambda: not self._paused or self._roll_backs > 0)
                continue
            asked = where()
            if asked is None:
                return None
            self._asking(asked, timeout_s)
            try:
                await workflow.wait_condition(
                    lambda: self._decision is not None or self._roll_backs > 0 or self._paused,
                    timeout=timedelta(seconds=timeout_s),
                )
            except TimeoutError:
                return f"no approval {asked} within {timeout_s:g}s"
            finally:
                self._progress.awaiting_approval = None
            if self._roll_backs or self._paused:
                self._decision = None
                continue
            try:
                await self._take_decision(asked)
            except SagaAbandoned as exc:
                return str(exc)
            return None

    async def _roll_back_last(self, request: EvacuationRequest, switched: dict[int, dict[str, Any]]) -> None:
        if not switched:
            return
        number = max(switched)
        outcome = self._outcomes[number - 1]
        if not switched[number].get("reverse_link"):
            outcome.detail = "not rolled back: its switch left no reverse link to return along"
            return
        ended = switched.pop(number)
        back = await self._switch(Kind.SWITCHBACK, None, ended["keys"], ended["reverse_link"], request,
                                  number=number)  # fmt: skip
        if back["outcome"] == SWITCHED:
            outcome.outcome = ROLLED_BACK
            outcome.detail = f"switched back along {ended['reverse_link']}"
        else:
            switched[number] = ended
            outcome.detail = f"the roll-back did not switch: {back.get('detail', '')}"

    async def _switch(
        self,
        kind: Kind,
        batch: EvacuationBatch | None,
        keys: list[str],
        link: str,
        request: EvacuationRequest,
        *,
        number: int = 0,
    ) -> dict[str, Any]:
        """One switch of a batch's keys, as its own saga (a child workflow); its result, switched or not."""
        number = batch.number if batch is not None else number
        step, outcome = _name(number), self._outcomes[number - 1]
        self._phase(step, f"{kind.value} of {', '.join(outcome.apps[:5])}")
        self._mark(step, "running", kind.value)
        policy = replace(request.policy, approval=ApprovalPoint.NONE)
        asked = SwitchRequest(list(keys), link=link, target=request.target if batch else request.source,
                              actor=request.actor, reason=f"evacuation {workflow.info().workflow_id}, batch "
                              f"{number}", policy=policy)  # fmt: skip
        began = workflow.now()
        try:
            ended = await switch(kind, asked)
        except (ChildWorkflowError, WorkflowAlreadyStartedError) as exc:  # terminated, timed out, one running
            ended = {
                "outcome": "failed",
                "detail": reason(exc),
                "keys": list(keys),
                "saga_id": "",
                "run_id": "",
            }
        if ended["run_id"]:
            self._switches.append(ended["run_id"])
        if kind is Kind.SWITCHOVER:
            outcome.outcome = SWITCHED if ended["outcome"] == SWITCHED else ended["outcome"]
            outcome.saga_id, outcome.pause_ms = ended["saga_id"], ended.get("pause_ms", 0)
            outcome.duration_ms = millis(workflow.now() - began)
            outcome.records_copied, outcome.verdict = ended.get("records_copied", 0), ended.get("verdict", "")
            outcome.detail = ended.get("detail", "")
        self._mark(step, "done" if ended["outcome"] == SWITCHED else "failed",
                   f"{kind.value}: {ended['outcome']} {ended.get('detail', '')}".strip())  # fmt: skip
        return ended

    async def _retire(
        self,
        request: EvacuationRequest,
        result: EvacuationResult,
        plan: EvacuationPlan,
        switched: dict[int, dict[str, Any]],
        link: str,
    ) -> None:
        """With an operator's approval, remove the links and delete on the source the topics of every batch
        switched, and the unused ones once every batch has moved."""
        name = "retire source"
        kept = f"the source's topics stay on {request.source}, copied back by each batch's reverse link"

        def topics() -> list[str]:
            unused = set(plan.unused) if len(switched) == len(plan.batches) else set()
            return sorted({t for n in switched for t in self._outcomes[n - 1].topics} | unused)

        if not request.policy.retire_source or not topics():
            self._mark(name, "skipped", f"{kept} (policy)" if topics() else "nothing to retire")
            return
        refused = await self._gate(
            lambda: f"before deleting {len(topics())} topics on {request.source}" if topics() else None,
            request, switched,
        )  # fmt: skip
        if refused is not None or not topics():  # rolled back meanwhile, every batch
            self._mark(name, "skipped", refused or "nothing to retire")
            result.detail = f"{kept}: {refused}" if refused else result.detail
            return
        everything = len(switched) == len(plan.batches)
        links = [x for n in sorted(switched) for x in (switched[n]["link"], switched[n]["reverse_link"]) if x]
        unused = plan.unused if everything else []
        retire = RetireEvacuatedRequest(workflow.info().workflow_id, request.source, topics(),
                                        [*links, *([link] if everything else [])],
                                        link if unused else None, unused)  # fmt: skip
        try:
            retired = await self._step(
                name, evacuations.RETIRE_EVACUATED, retire, RetiredEvacuated, timeout_s=600, heartbeat_s=30,
                give_up_s=24 * 3600.0,
            )  # fmt: skip
        except Exception as exc:  # the moves stand; what is left can be removed by hand
            result.detail = f"retiring the source failed ({reason(exc)}): {kept}"
            return
        result.retired = retired.deleted
        result.detail = (
            f"{len(retired.deleted)} topics deleted on {request.source}; links removed: {len(retired.links)}"
        )

    async def _end(self, result: EvacuationResult, *, fail: str | None = None) -> EvacuationResult:
        result.duration_ms = millis(workflow.now() - self._started)
        result.switches = list(self._switches)
        result.approvals = list(self._approvals)
        self._phase(result.outcome, result.detail)
        await self._record(
            "ended", outcome=result.outcome, detail=result.detail, result=json.dumps(asdict(result))
        )
        if fail is not None:
            raise ApplicationError(result.detail, asdict(result), type=fail, non_retryable=True)
        return result


def _fixed(where: str | None) -> Callable[[], str | None]:
    return lambda: where


def _name(number: int) -> str:
    return f"batch {number}"
