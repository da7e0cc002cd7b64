"""The switchback: the keys return along the reverse link the switchover left, the same exact way."""

from __future__ import annotations

from temporalio import workflow

from workflows.planned import PlannedSwitch

with workflow.unsafe.imports_passed_through():
    from switchyard.sagas.requests import Kind, SagaResult, SwitchRequest


@workflow.defn(name="Switchback")
class Switchback(PlannedSwitch):
    @workflow.run
    async def run(self, request: SwitchRequest) -> SagaResult:
        return await self._switch(request, Kind.SWITCHBACK)
