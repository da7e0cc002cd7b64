"""A DR drill's own steps: its canary's corner made and tidied away, and the canary itself run.

The canary is one long activity: an application producing and consuming through the gateway for as long
as the drill switches it. It asks its drill (a query) when the switches are over and tells it (a signal)
once its traffic flows — both through the worker's Temporal client. It heartbeats each second: a drill
that ends or gives up on it (it waits for the canary's count a few minutes at most) stops its traffic at
the next beat. Everything that blocks (the clients, the ledger, counting) runs on threads: the event loop
is the worker's, shared with every saga's asynchronous steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from temporalio import activity
from temporalio.client import WorkflowQueryFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities.deps import Deps
from activities.errors import mapped
from activities.recorded import figures, record_attempt, step
from switchyard import kafka
from switchyard.drills import canary
from switchyard.drills.canary_link import delete_links, make_own_link
from switchyard.errors import KafkaOperationError
from switchyard.sagas import steps
from switchyard.sagas.drills import (
    CanaryFindings,
    CanaryRequest,
    DrillSetup,
    DrillState,
    PrepareRequest,
    TidyRequest,
    drill_app,
    drill_topic,
)
from switchyard.traffic import Traffic

LIVE_TIMEOUT_S = 120.0
"""How long the canary's records may take to flow end to end at first (a group's first join)."""
ASK_EVERY_S = 0.5
ASK_PATIENCE_S = 60.0
"""How long the drill may not answer the canary's question before the canary gives up."""
QUICK_STOP_S = 5.0
Result = TypeVar("Result")
log = logging.getLogger(__name__)


class DrillActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @step(steps.DRILL_PREPARE)
    def prepare(self, request: PrepareRequest) -> DrillSetup:
        """The drill's topic, its link between the exercised link's clusters and its AppID bound to the
        source: a corner of its own, so promoting its link moves no application."""
        exercised = self.deps.link(request.link)
        app, topic = drill_app(request.name), drill_topic(request.name, request.tag)
        make_own_link(
            self.deps.config, self.deps.store, app=app, topic=topic, link_id=topic, source=exercised.source,
            target=exercised.target, partitions=request.partitions, actor=f"drill:{request.name}",
            reason=f"drill {request.name} exercises {exercised.source} -> {exercised.target}",
        )  # fmt: skip
        gateway = self.deps.config.gateway
        configured = f"{gateway.advertised_host or gateway.host}:{gateway.bootstrap_port}"
        return DrillSetup(
            app=app, topic=topic, link=topic, group=f"{topic}-canary", source=exercised.source,
            target=exercised.target, bootstrap=request.bootstrap or configured,
        )  # fmt: skip

    @step(steps.DRILL_TIDY)
    def tidy(self, request: TidyRequest) -> list[str]:
        """The run's links and its topic gone (from every configured cluster that has it: a prepare that
        failed halfway left it where it got to); the drill's AppID keeps its binding for the next run.
        Returns what was removed."""
        config = self.deps.config
        gone = delete_links(config, self.deps.store, request.links, actor="drill", reason="drill: tidy up")
        kept = []
        for cluster_id, cluster in sorted(config.clusters.items()) if config.drills.delete_topics else []:
            try:
                if kafka.delete_topic(cluster.bootstrap, request.topic):
                    gone.append(f"{request.topic} on {cluster_id}")
            except (KafkaOperationError, TimeoutError) as exc:  # the others still go; retried as a step
                kept.append(f"{cluster_id} ({exc})")
        if kept:
            raise KafkaOperationError(f"topic {request.topic} not deleted on {', '.join(kept)}")
        return gone

    @activity.defn(name=steps.DRILL_CANARY)
    async def run_canary(self, request: CanaryRequest) -> CanaryFindings:
        started = datetime.now(UTC)
        try:
            found = await self._canary(request)
        except BaseException as exc:
            await _record(self.deps, started, "failed", f"{type(exc).__name__}: {exc}", {})
            raise
        shown = figures(found)
        shown.pop("timeline", None)
        await _record(self.deps, started, "ok", "", shown)
        return found

    async def _canary(self, request: CanaryRequest) -> CanaryFindings:
        setup = request.setup
        traffic = Traffic(
            setup.bootstrap, setup.app, setup.topic, setup.group, idempotent=True,
            rate_per_s=request.rate_per_s, consumer_settings=self.deps.config.drills.consumer,
            first=canary.first_value(activity.info().attempt),
        )  # fmt: skip
        began = (datetime.now(UTC), time.monotonic())
        traffic.start()
        try:
            stopped_by, state = await _through_the_switches(traffic, began[1] + request.longest_s)
        except BaseException as exc:  # cancelled, stalled, the drill gone: stop at once, nothing to count
            with contextlib.suppress(Exception):
                await _beating(lambda: traffic.stop(QUICK_STOP_S, catch_up=False), "stopping")
            if isinstance(exc, TimeoutError):  # traffic.wait_for's: the canary's records never flowed
                raise ApplicationError(
                    f"the canary: {exc}", type="CanaryStalled", non_retryable=True
                ) from None
            raise
        await _beating(traffic.stop, "stopping: the group catches up")
        with mapped():
            bootstrap = self.deps.bootstrap(state.cluster or setup.source)
            records = await _beating(lambda: kafka.read_partitions(bootstrap, setup.topic), "reading")

        def judged() -> CanaryFindings:
            held = {p: Counter(int(r.value or b"-1") for r in rs) for p, rs in records.items()}
            return canary.findings(
                traffic, began=began, switches=state.switches, held=held, stopped_by=stopped_by
            )

        return await _beating(judged, "counting")


async def _through_the_switches(traffic: Traffic, deadline: float) -> tuple[str, DrillState]:
    """Tell the drill once the canary's records flow, then ask it until its switches are over (or the
    deadline passes). A query that fails is asked again for a while: the drill's own worker may be
    restarting, and the canary's evidence is worth more than one answer."""
    info = activity.info()
    drill = activity.client().get_workflow_handle(info.workflow_id or "", run_id=info.workflow_run_id)
    await _beating(lambda: traffic.wait_for(1, timeout_s=LIVE_TIMEOUT_S), "starting")
    await drill.signal("canary_live")
    state, failing_since = DrillState(), None
    while time.monotonic() < deadline:
        activity.heartbeat(f"{len(traffic.acked)} acknowledged, {len(traffic.batches)} batches processed")
        try:
            state = await drill.query("drill_state", result_type=DrillState)
            failing_since = None
        except (RPCError, WorkflowQueryFailedError):
            failing_since = failing_since or time.monotonic()
            if time.monotonic() - failing_since > ASK_PATIENCE_S:
                raise
        if state.done:
            return "switches over", state
        await asyncio.sleep(ASK_EVERY_S)
    return "time limit", state


async def _record(deps: Deps, started: datetime, outcome: str, detail: str, found: dict[str, Any]) -> None:
    """The canary's attempt in the ledger, off the event loop; a ledger that cannot take it costs the
    trail its line, never the canary its findings."""
    context = contextvars.copy_context()  # the activity's, which record_attempt reads
    try:
        await asyncio.get_running_loop().run_in_executor(
            None,
            lambda: context.run(
                record_attempt, deps, steps.DRILL_CANARY, started, outcome=outcome, detail=detail, found=found
            ),
        )
    except Exception:
        log.exception("the canary's %s attempt could not be recorded", outcome)


async def _beating(work: Callable[[], Result], doing: str) -> Result:
    """Do blocking ``work`` on a thread, heartbeating each second while it runs; what it raises is raised
    (a TimeoutError of its own included)."""
    running = asyncio.get_running_loop().run_in_executor(None, work)
    while True:
        activity.heartbeat(doing)
        done, _ = await asyncio.wait({running}, timeout=1.0)
        if done:
            return running.result()
