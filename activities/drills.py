"""A DR drill's own steps: its canary's corner made and tidied away, and the canary itself run.

The canary is one long activity: an application producing and consuming through the gateway for as long
as the drill switches it. It asks its drill (a query) when the switches are over and tells it (a signal)
once its traffic flows — both through the worker's Temporal client — and heartbeats meanwhile, so a drill
that is cancelled stops its traffic at once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from temporalio import activity

from activities.deps import Deps
from activities.errors import mapped
from activities.recorded import figures, record_attempt, step
from switchyard import kafka
from switchyard.drills import canary
from switchyard.drills.canary_link import delete_links, make_own_link
from switchyard.sagas import steps
from switchyard.sagas.drills import (
    CanaryFindings,
    CanaryRequest,
    DrillSetup,
    DrillState,
    PrepareRequest,
    TidyRequest,
    drill_app,
)
from switchyard.traffic import Traffic

LIVE_TIMEOUT_S = 120.0
"""How long the canary's records may take to flow end to end at first (a group's first join)."""
ASK_EVERY_S = 0.5
QUICK_STOP_S = 5.0
Result = TypeVar("Result")


class DrillActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @step(steps.DRILL_PREPARE)
    def prepare(self, request: PrepareRequest) -> DrillSetup:
        """The drill's topic, its link between the exercised link's clusters and its AppID bound to the
        source: a corner of its own, so promoting its link moves no application."""
        exercised = self.deps.link(request.link)
        app = drill_app(request.name)
        topic = f"{app}-{request.tag}"
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
        """The drill's links and its topic (on both clusters) gone; its AppID's binding stays for the next
        run. Returns what was removed."""
        config, setup = self.deps.config, request.setup
        gone = delete_links(
            config, self.deps.store, request.links, actor=f"drill:{setup.app}", reason="drill: tidy up"
        )
        for cluster in (setup.source, setup.target):
            if kafka.delete_topic(config.clusters[cluster].bootstrap, setup.topic):
                gone.append(f"{setup.topic} on {cluster}")
        return gone

    @activity.defn(name=steps.DRILL_CANARY)
    async def run_canary(self, request: CanaryRequest) -> CanaryFindings:
        started = datetime.now(UTC)
        try:
            found = await self._canary(request)
        except BaseException as exc:
            record_attempt(
                self.deps, steps.DRILL_CANARY, started, outcome="failed", detail=repr(exc), found={}
            )
            raise
        shown = figures(found)
        shown.pop("timeline", None)
        record_attempt(self.deps, steps.DRILL_CANARY, started, outcome="ok", detail="", found=shown)
        return found

    async def _canary(self, request: CanaryRequest) -> CanaryFindings:
        info = activity.info()
        drill = activity.client().get_workflow_handle(info.workflow_id or "", run_id=info.workflow_run_id)
        setup = request.setup
        traffic = Traffic(
            setup.bootstrap,
            setup.app,
            setup.topic,
            setup.group,
            idempotent=True,
            rate_per_s=request.rate_per_s,
        )
        began = (datetime.now(UTC), time.monotonic())
        traffic.start()
        stopped_by, state = "time limit", DrillState()
        try:
            await _beating(lambda: traffic.wait_for(1, timeout_s=LIVE_TIMEOUT_S), "starting")
            await drill.signal("canary_live")
            deadline = began[1] + request.longest_s
            while time.monotonic() < deadline:
                activity.heartbeat(f"{len(traffic.acked)} acknowledged, {len(traffic.received)} processed")
                state = await drill.query("drill_state", result_type=DrillState)
                if state.done:
                    stopped_by = "switches over"
                    break
                await asyncio.sleep(ASK_EVERY_S)
        except BaseException:  # cancelled, or the drill is gone: stop at once, nothing to count
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: traffic.stop(timeout_s=QUICK_STOP_S)
            )
            raise
        await _beating(traffic.stop, "stopping: the group catches up")
        with mapped():
            bootstrap = self.deps.bootstrap(state.cluster or setup.source)
            records = await _beating(lambda: kafka.read_partitions(bootstrap, setup.topic), "reading")
        held = {p: Counter(int(r.value or b"-1") for r in rs) for p, rs in records.items()}
        return canary.findings(
            traffic, began=began, switches=state.switches, held=held, stopped_by=stopped_by
        )


async def _beating(work: Callable[[], Result], doing: str) -> Result:
    """Do blocking ``work`` on a thread, heartbeating while it runs."""
    running = asyncio.get_running_loop().run_in_executor(None, work)
    while True:
        activity.heartbeat(doing)
        try:
            return await asyncio.wait_for(asyncio.shield(running), 1.0)
        except TimeoutError:
            continue
