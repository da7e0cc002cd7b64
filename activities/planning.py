"""The saga steps that decide whether a switch may go ahead: the plan, and whether a cluster answers."""

from __future__ import annotations

from activities.deps import Deps
from activities.recorded import step
from switchyard.config import split_hostport
from switchyard.planning import plan_switch
from switchyard.sagas import steps
from switchyard.sagas.steps import Plan, PlanRequest, Probe, ProbeRequest
from switchyard.stack import health


class PlanningActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @step(steps.PLAN)
    def plan_switch(self, request: PlanRequest) -> Plan:
        return plan_switch(self.deps.store, self.deps.config, request)

    @step(steps.PROBE)
    def probe_cluster(self, request: ProbeRequest) -> Probe:
        """Whether any bootstrap broker of the cluster answers ApiVersions within the time given: a
        broker that is frozen, cut off or gone does not."""
        details = []
        for address in self.deps.bootstrap(request.cluster).split(","):
            found = health.kafka(*split_hostport(address), timeout_s=request.timeout_s)
            if found.ok:
                return Probe(request.cluster, True, f"{address}: {found.detail}")
            details.append(f"{address}: {found.detail}")
        return Probe(request.cluster, False, "; ".join(details))
