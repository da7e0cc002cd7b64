"""The planned switchover: an application's keys move to the standby, clients following on their own."""

from __future__ import annotations

from temporalio import workflow

from workflows.planned import PlannedSwitch

with workflow.unsafe.imports_passed_through():
    from switchyard.sagas.requests import Kind, SagaResult, SwitchRequest


@workflow.defn(name="Switchover")
class Switchover(PlannedSwitch):
    @workflow.run
    async def run(self, request: SwitchRequest) -> SagaResult:
        return await self._switch(request, Kind.SWITCHOVER)
