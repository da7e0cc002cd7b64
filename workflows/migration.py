"""Topic migration: one topic moves to another cluster with every application the gateways saw use it.

find users → copy the topic (a link of its own, until it keeps up) → the planned switch of the users'
topic and group keys (:mod:`workflows.planned`) → approval → retire the source copy

Until the switch's flip, a failure compensates as a switchover's does and the copy keeps running, so
a rerun starts from where it got. After the flip the saga goes forward; the source copy is only retired
(the links removed, the topic deleted on the source) when an operator approves — until then the
reverse link keeps it current, and a rejection or no answer in time leaves it so.
"""

from __future__ import annotations

from temporalio import workflow

from workflows.base import SagaAbandoned
from workflows.planned import FOREVER_S, PlannedSwitch
from workflows.planned import STEPS as SWITCH_STEPS

with workflow.unsafe.imports_passed_through():
    from switchyard.sagas import steps
    from switchyard.sagas.failures import reason
    from switchyard.sagas.ids import migration_link
    from switchyard.sagas.requests import Kind, MigrationRequest, SagaResult, SwitchRequest
    from switchyard.sagas.steps import (
        MigrationLink,
        MigrationLinkRequest,
        Retired,
        RetireRequest,
        TopicUsers,
        UsersRequest,
    )

STEPS = ["find users", "copy topic", *SWITCH_STEPS, "retire source copy"]
CAUGHT_UP_S = 5.0
"""The copy keeps up when every partition was fully copied within this many seconds."""


@workflow.defn(name="TopicMigration")
class TopicMigration(PlannedSwitch):
    @workflow.run
    async def run(self, request: MigrationRequest) -> SagaResult:
        saga, topic, target = workflow.info().workflow_id, request.topic, request.target
        link = migration_link(topic, target)
        self._begin(Kind.MIGRATION, [], STEPS)
        await self._record(
            "started",
            actor=request.actor,
            reason=f"migrate {topic} to {target}: {request.reason}".strip(": "),
        )
        result = SagaResult(saga, Kind.MIGRATION, [], "refused", target=target, link=link)
        found = await self._step(
            "find users", steps.TOPIC_USERS, UsersRequest(topic, target, link, request.active_within_s),
            TopicUsers, timeout_s=60, give_up_s=300,
        )  # fmt: skip
        if found.refusal is not None:
            result.detail = found.refusal
            await self._fail(result, "SwitchRefused")
        self._set_keys(found.keys)
        result.keys = result.moved = list(found.keys)
        self._set_route(found.source, target, link)

        copy = MigrationLinkRequest(
            saga, topic, found.source, target, link, CAUGHT_UP_S, request.copy_timeout_s
        )
        try:
            await self._step(
                "copy topic", steps.PREPARE_MIGRATION, copy, MigrationLink,
                timeout_s=request.copy_timeout_s + 60, heartbeat_s=30, give_up_s=request.copy_timeout_s + 600,
            )  # fmt: skip
        except BaseException as exc:
            result.outcome, result.source = "compensated", found.source
            result.detail = f"the copy of {topic} did not catch up: {reason(exc)}; no client was moved"
            await self._fail(result, "MigrationAbandoned")

        switch = SwitchRequest(
            found.keys, target=target, link=link, actor=request.actor, reason=request.reason,
            policy=request.policy,
        )  # fmt: skip
        await self._move(
            switch, result, Kind.MIGRATION, workflow.now(), reverse=f"{link}-back",
            left=f"link {link} keeps copying (run the migration again to finish)",
        )  # fmt: skip
        result.outcome = "migrated"
        await self._retire(request, result, link)
        return await self._finish(result)

    async def _retire(self, request: MigrationRequest, result: SagaResult, link: str) -> None:
        """With an operator's approval, remove the links and the topic on the cluster it left."""
        name = "retire source copy"
        kept = f"{request.topic} stays on {result.source}"
        if not request.policy.retire_source:
            self._mark(name, "skipped", f"{kept} (policy), copied back by {result.reverse_link}")
            return
        try:
            await self._await_approval("before retiring the source copy", request.policy.approval_timeout_s)
        except SagaAbandoned as exc:
            self._mark(name, "skipped", str(exc))
            result.detail = f"{kept}, copied back by {result.reverse_link}: {exc}"
            return
        links = [link] + ([result.reverse_link] if result.reverse_link else [])
        saga = workflow.info().workflow_id
        retire = RetireRequest(saga, request.topic, result.source, links, True, list(result.moved))
        try:
            await self._step(
                name, steps.RETIRE_TOPIC, retire, Retired, timeout_s=180, heartbeat_s=30, give_up_s=FOREVER_S
            )
        except Exception as exc:  # the migration stands; what is left can be removed by hand
            result.detail = f"retiring the source copy failed ({reason(exc)}): {kept}"
            return
        result.detail = f"{request.topic} deleted on {result.source}; links {', '.join(links)} removed"
