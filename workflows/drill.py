"""The DR drill: a canary application of the drill's own is switched over to the standby and back while it
produces and consumes through the gateway, and the drill reports what it saw.

prepare (topic, link, binding of the drill's own) → canary traffic flows → switchover → switchback →
the canary stops and counts → Spark verification of both copies → tidy → verdict against the objectives

The switches are the real sagas, run as child workflows: a drill proves exactly what an operator's switch
would do. A drill that finds a problem has done its job: it completes with the outcome ``failed`` and
every missed objective named; only a drill that could not run (its own steps failed) is ``abandoned``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, replace
from datetime import timedelta
from typing import Any

from temporalio import workflow

from workflows.base import SPARK_JOB, SagaAbandoned, SagaWorkflow
from workflows.children import switch

with workflow.unsafe.imports_passed_through():
    from switchyard.sagas import steps
    from switchyard.sagas.drill_verdict import failures
    from switchyard.sagas.drills import (
        DRILL_KIND,
        CanaryFindings,
        CanaryRequest,
        DrillRequest,
        DrillResult,
        DrillSetup,
        DrillState,
        PrepareRequest,
        TidyRequest,
        VerifyFigures,
        drill_app,
        drill_topic,
    )
    from switchyard.sagas.failures import reason
    from switchyard.sagas.requests import ApprovalPoint, Kind, SwitchRequest
    from switchyard.sagas.steps import Drained, DrainRequest, Partition, VerifyOutcome, VerifyRequest

STEPS = ["prepare", "canary", "switchover", "switchback", "verify (Spark)", "tidy"]
DRAIN_BEFORE_VERIFY = "drill-drains-before-verify"
"""The patch that waits for the copy to catch up before the Spark job compares both sides."""
WAIT_AFTER_EVERY_SWITCH = "drill-waits-after-every-switch"
"""The patch that lets the canary see a failed switch's end too (its producer's wait through it)."""
LIVE_WAIT_S = 180.0
"""How long the canary may take to get its first record through (it fails on its own after 120 s)."""
CANARY_SLACK_S = 300.0
"""The canary's stop and count after its traffic's longest run."""
CANARY_STOP_S = 180.0
"""How long the canary may take to stop and count once told; past it, it is cancelled."""


@workflow.defn(name="Drill")
class Drill(SagaWorkflow):
    def __init__(self) -> None:
        super().__init__()
        self._live = False
        self._state = DrillState()
        self._left = ""
        """What the drill could not tidy away, if anything, for its detail."""
        self._missed: list[str] = []
        """What the drill itself could not check, beside what the verdict finds."""
        self._canary_failed: BaseException | None = None

    @workflow.signal
    def canary_live(self) -> None:
        """The canary's first record went through: the switches may start."""
        self._live = True

    @workflow.query
    def drill_state(self) -> DrillState:
        """What the canary asks: are the switches over, when did each run, where do its records end."""
        return self._state

    @workflow.run
    async def run(self, request: DrillRequest) -> DrillResult:
        info = workflow.info()
        app = drill_app(request.name)
        self._begin(DRILL_KIND, [app], STEPS)
        why = request.reason or f"drill {request.name} on the clusters of link {request.link}"
        await self._record("started", keys=[app], actor=request.actor, reason=why)
        result = DrillResult(
            request.name, info.workflow_id, DRILL_KIND, "abandoned", objectives=request.objectives
        )
        try:
            await self._drill(request, result)
        except asyncio.CancelledError:  # its end is still recorded: a report says it was cancelled
            result.outcome, result.detail = "cancelled", "cancelled" + self._left
            await self._end(result)
            raise
        except Exception as exc:  # a step of the drill itself: the report says which, with what it has
            result.detail = f"the drill could not run{self._at(exc)}: {reason(exc)}"
        if result.detail == "":
            result.failures = failures(result) + self._missed
            result.outcome = "failed" if result.failures else "passed"
            result.detail = "; ".join(result.failures) or "every objective met"
        result.detail += self._left
        await self._end(result)
        return result

    async def _end(self, result: DrillResult) -> None:
        self._phase(result.outcome, result.detail)
        await self._record(
            "ended", outcome=result.outcome, detail=result.detail, result=json.dumps(asdict(result))
        )

    async def _drill(self, request: DrillRequest, result: DrillResult) -> None:
        """Prepare, canary and switches, verification; tidied whatever happened — a prepare that failed
        halfway too: the names are the workflow's, so tidy needs nothing from the steps before it."""
        tag = workflow.info().run_id[:8]
        topic = drill_topic(request.name, tag)
        links = [topic]
        try:
            prepare = PrepareRequest(request.name, request.link, request.partitions, tag, request.bootstrap)
            setup = await self._step(
                "prepare", steps.DRILL_PREPARE, prepare, DrillSetup, timeout_s=180, give_up_s=600
            )
            result.setup, self._state.cluster = setup, setup.source
            await self._canary_and_switches(request, setup, result, links)
            if self._canary_failed and not result.sagas:
                raise self._canary_failed
            await self._verify(request, setup, result, links)
        finally:
            try:
                await self._step(
                    "tidy",
                    steps.DRILL_TIDY,
                    TidyRequest(topic, links),
                    list[str],
                    timeout_s=120,
                    give_up_s=600,
                )
            except Exception as exc:  # what the drill found stands; what it left behind is named
                self._left = f"; not tidied ({reason(exc)}): links {', '.join(links)}, topic {topic}"

    async def _verify(
        self, request: DrillRequest, setup: DrillSetup, result: DrillResult, links: list[str]
    ) -> None:
        """Both copies of the canary's topic, record by record, along the link the switchback left copying
        it, once that link has copied everything the canary wrote. Its group is judged by what it
        processed: its offsets on the copy trail the mirror's periodic carry, so comparing them would race
        it."""
        back = result.sagas[1] if len(result.sagas) > 1 else None  # the canary's switchback
        if not request.spark_verify or back is None or back["outcome"] != "switched":
            self._mark("verify (Spark)", "skipped")
            return
        if not back.get("reverse_link"):
            self._mark("verify (Spark)", "skipped", "no link copies the canary's topic back")
            self._missed.append("not verified: the switchback left no link copying the canary's topic back")
            return
        partitions = [Partition(setup.topic, p) for p in range(request.partitions)]
        drain = DrainRequest(links[-1], [], request.policy.drain_timeout_s, partitions)
        if workflow.patched(DRAIN_BEFORE_VERIFY):
            await self._step(
                "verify (Spark)",
                steps.DRAIN,
                drain,
                Drained,
                timeout_s=drain.timeout_s + 30,
                give_up_s=drain.timeout_s + 60,
            )
        verify = VerifyRequest(f"{workflow.info().run_id}-verify", links[-1], [setup.topic], [])
        checked = await self._step(
            "verify (Spark)", steps.VERIFY, verify, VerifyOutcome, timeout_s=3600, heartbeat_s=30,
            retry=SPARK_JOB,
        )  # fmt: skip
        result.verification = VerifyFigures(
            checked.verdict, checked.records, checked.extra_records, checked.divergent_partitions,
            checked.wrong_groups,
        )  # fmt: skip

    async def _canary_and_switches(
        self, request: DrillRequest, setup: DrillSetup, result: DrillResult, links: list[str]
    ) -> None:
        """The switches while the canary runs; however they end, the canary is told, waited for (stopped
        if it will not), and its findings kept — or its failure, named."""
        asked = CanaryRequest(setup, request.rate_per_s)
        running = self._step(
            "canary", steps.DRILL_CANARY, asked, CanaryFindings, timeout_s=asked.longest_s + CANARY_SLACK_S,
            heartbeat_s=30, retry=SPARK_JOB,
        )  # fmt: skip  # once: a canary started again would miss what the first saw
        canary = asyncio.ensure_future(running)
        try:
            try:
                await workflow.wait_condition(
                    lambda: self._live or canary.done(), timeout=timedelta(seconds=LIVE_WAIT_S)
                )
            except TimeoutError:
                self._canary_failed = SagaAbandoned(f"no canary record got through within {LIVE_WAIT_S:g}s")
            if self._live:
                await self._switches(request, setup, result, links)
        finally:
            self._state.done = True
            try:
                await workflow.wait_condition(canary.done, timeout=timedelta(seconds=CANARY_STOP_S))
            except TimeoutError:
                canary.cancel()
            (ended,) = await asyncio.gather(canary, return_exceptions=True)
        if isinstance(ended, CanaryFindings):
            result.canary = ended
        elif isinstance(ended, asyncio.CancelledError):  # not the drill's cancellation: its own, above
            self._canary_failed = SagaAbandoned(f"the canary did not stop within {CANARY_STOP_S:g}s")
            self._missed.append(str(self._canary_failed))
        elif self._canary_failed is None:
            self._canary_failed = ended
            self._missed.append(f"the canary failed: {reason(ended)}")

    async def _switches(
        self, request: DrillRequest, setup: DrillSetup, result: DrillResult, links: list[str]
    ) -> None:
        """The canary's switchover and switchback; then, for a drill on application keys, theirs."""
        await workflow.sleep(timedelta(seconds=request.warmup_s))
        if not await self._pair(request, [setup.app], links, result, canary=True) or not request.keys:
            return
        await self._pair(request, request.keys, [request.link], result, canary=False)

    async def _pair(
        self, request: DrillRequest, keys: list[str], links: list[str], result: DrillResult, *, canary: bool
    ) -> bool:
        """A switchover of ``keys`` along ``links[-1]`` and its switchback along the link it left; whether
        both switched. The canary's links are the drill's (tidied); an application's stay its own."""
        for kind in (Kind.SWITCHOVER, Kind.SWITCHBACK):
            ended = await self._switch(kind, request, keys, links[-1], canary=canary)
            result.sagas.append(ended)
            if ended.get("reverse_link"):
                links.append(ended["reverse_link"])
            if ended["outcome"] == "switched" and canary:
                self._state.cluster = ended["target"]
            if ended["outcome"] == "switched" or workflow.patched(WAIT_AFTER_EVERY_SWITCH):
                await workflow.sleep(timedelta(seconds=request.warmup_s))  # the canary sees the switch end
            if ended["outcome"] != "switched":
                return False
        return True

    async def _switch(
        self, kind: Kind, request: DrillRequest, keys: list[str], link: str, *, canary: bool
    ) -> dict[str, Any]:
        """One switch as its own saga (a child workflow); its result, whether it switched or not. The
        canary's never waits for anyone; an application's waits for an approval before its block."""
        step = kind.value if canary else f"application {kind.value}"
        self._phase(step)
        self._mark(step, "running")
        policy = replace(
            request.policy, approval=ApprovalPoint.NONE if canary else ApprovalPoint.BEFORE_BLOCK
        )
        why = f"drill {workflow.info().workflow_id}"
        asked = SwitchRequest(list(keys), link=link, actor=f"drill:{request.name}", reason=why, policy=policy)
        began = workflow.now()
        ended = await switch(kind, asked)
        self._state.switches.append((kind.value, began.isoformat(), workflow.now().isoformat()))
        self._mark(step, "done" if ended["outcome"] == "switched" else "failed", ended.get("detail", ""))
        return ended
