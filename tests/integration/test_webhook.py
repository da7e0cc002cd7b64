"""`switchyard webhook` as its own process on a real socket, against the session stack's Temporal with a
real worker: a firing Alertmanager notification starts a real saga (its alert in the saga's memo, its
sender in the ledger), the HA partner's copy and a re-sent notification start no second one, and SIGTERM
ends the receiver with exit code 0. Then the receiver's Temporal side on its own, with a stand-in saga
that waits for its approval as the real ones do: a resolution rejects it through the ``reject`` update,
and the alert firing again starts a fresh run under the same id."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from temporalio import workflow
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from switchyard import temporal
from switchyard.alerts.dispatch import Dispatcher, Outcome
from switchyard.alerts.payloads import AlertmanagerNotification
from switchyard.config import Config
from switchyard.ledger import Ledger
from switchyard.routing.store import RoutingStore
from switchyard.sagas.requests import Decision, Progress, SwitchRequest
from switchyard.stack import Stack
from tests.helpers.alerts import StaticKeys
from tests.helpers.processes import WebhookProcess, WorkerProcess
from workers.webhook.sagas import TemporalSagas

TOKEN = "integration-token-5e7a"
GROUP = '{}/{severity="critical"}:{alertname="OrdersUnreachable"}'


@dataclass
class Receiving:
    hook: WebhookProcess
    app: str
    ledger_path: Path

    def send(self, payload: dict[str, Any], token: str = TOKEN) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        return httpx.post(
            f"{self.hook.url}/alertmanager", content=json.dumps(payload), headers=headers, timeout=30
        )


@pytest.fixture(scope="module")
def receiving(
    stack: Stack,
    stack_config: Config,
    routing: RoutingStore,
    ledger_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Receiving]:
    """A worker and a receiver on the module's routing root, ledger and task queue; one policy switches
    an application of the module's own over when its alert fires."""
    app = f"orders-{uuid.uuid4().hex[:6]}"
    env = {
        "SWITCHYARD__ZOOKEEPER__ROOT": routing.layout.root,
        "SWITCHYARD__LEDGER__URL": f"sqlite:///{ledger_path}",
        "SWITCHYARD__TEMPORAL__TASK_QUEUE": f"webhook-{uuid.uuid4().hex[:8]}",
    }
    policy = {
        "name": "orders",
        "match": {"alertname": "OrdersUnreachable"},
        "saga": "switchover",
        "keys": [app],
    }
    hook_env = {
        **env,
        "SWITCHYARD__WEBHOOK__ALERTMANAGER": "{bearer: {token_env: SWITCHYARD_TEST_WEBHOOK_TOKEN}}",
        "SWITCHYARD__WEBHOOK__POLICIES": yaml.safe_dump([policy], default_flow_style=True),
        "SWITCHYARD_TEST_WEBHOOK_TOKEN": TOKEN,
    }
    assert stack_config.source is not None
    logs = tmp_path_factory.mktemp("webhook")
    worker = WorkerProcess(
        stack_config.source, root=routing.layout.root, name="worker-webhook", log=logs / "worker.log",
        overrides=env,
    )  # fmt: skip
    hook = WebhookProcess(
        stack_config.source, root=routing.layout.root, log=logs / "webhook.log", overrides=hook_env
    )
    worker.start()
    hook.start()
    yield Receiving(hook, app, ledger_path)
    hook.stop()
    worker.stop()


def payload(*fingerprints: str, external_url: str = "http://alertmanager-0:9093") -> dict[str, Any]:
    labels = {"alertname": "OrdersUnreachable", "severity": "critical"}
    alerts = [
        {
            "status": "firing", "labels": {**labels, "instance": f"broker-{i}"},
            "annotations": {"summary": "orders cannot reach its cluster"},
            "startsAt": "2025-03-14T08:58:17.314159265Z", "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus-0:9090/graph", "fingerprint": fingerprint,
        }
        for i, fingerprint in enumerate(fingerprints)
    ]  # fmt: skip
    return {
        "receiver": "switchyard", "status": "firing", "alerts": alerts, "groupLabels": labels,
        "commonLabels": labels, "commonAnnotations": {}, "externalURL": external_url, "version": "4",
        "groupKey": GROUP, "truncatedAlerts": 0,
    }  # fmt: skip


def test_a_firing_alert_starts_one_real_saga_and_its_copies_start_none(
    receiving: Receiving, stack_config: Config
) -> None:
    saga = f"switchyard:{receiving.app}"
    assert receiving.send(payload("a1"), token="wrong").status_code == 401
    assert httpx.get(f"{receiving.hook.url}/readyz", timeout=30).json() == {"status": "ready"}

    first = receiving.send(payload("a1"))
    assert first.status_code == 200, first.text
    (result,) = first.json()["results"]
    assert (result["outcome"], result["saga"], result["keys"]) == ("started", saga, [receiving.app])

    async def newest() -> tuple[str, dict[str, Any], str]:
        """The newest run's id, memo and failure, once it has ended (refused at its plan: nobody knows
        the key — an alert policy's key is planned as an operator's)."""
        client = await temporal.connect(stack_config)
        handle = client.get_workflow_handle(saga)
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 60)
        described = await handle.describe()
        return described.run_id, dict(await described.memo()), str(failed.value.cause)

    run_id, memo, why = asyncio.run(newest())
    assert f"{receiving.app}: no binding names it and no gateway saw its clients" in why, why
    assert memo["alert"]["group_key"] == GROUP
    assert (memo["alert"]["status"], memo["alert"]["fingerprints"]) == ("firing", ["a1"])

    partner = receiving.send(payload("a1", external_url="http://alertmanager-1:9093"))
    assert partner.status_code == 200, partner.text
    assert partner.json()["repeat"] is True
    assert partner.json()["results"][0]["outcome"] == "cooling down"
    re_sent = receiving.send(payload("a1", "a2"))  # the group grew: handled afresh, the saga cools down
    assert (re_sent.json()["repeat"], re_sent.json()["results"][0]["outcome"]) == (False, "cooling down")

    assert asyncio.run(newest())[0] == run_id  # no run after the first
    ledger = Ledger.open(f"sqlite:///{receiving.ledger_path}")
    try:
        (run,) = ledger.saga_runs(saga)
    finally:
        ledger.close()
    assert run.actor == "alertmanager:switchyard"
    assert "OrdersUnreachable" in run.reason


def test_sigterm_ends_the_receiver_cleanly(receiving: Receiving) -> None:
    process = receiving.hook.process
    assert process is not None
    receiving.hook.stop()
    assert process.returncode == 0, receiving.hook.log.read_text()[-3000:]


# ---- the Temporal side: progress, reject, the ended run's approvals, the id reused


@workflow.defn(name="Switchover")
class WaitsForApproval:
    """A stand-in saga with the real ones' contract: a ``progress`` query that says where it waits, a
    ``reject`` update refused when it waits for nothing, and a rejection that fails it with its result
    (approvals included) as the failure's details."""

    def __init__(self) -> None:
        self._progress = Progress("switchover", [])
        self._decision: Decision | None = None

    @workflow.run
    async def run(self, request: SwitchRequest) -> dict[str, Any]:
        self._progress.keys = request.keys
        self._progress.awaiting_approval = "before the block"
        await workflow.wait_condition(lambda: self._decision is not None)
        assert self._decision is not None
        said = f"rejected before the block by {self._decision.by}: {self._decision.reason}"
        raise ApplicationError(said, {"keys": request.keys, "approvals": [said]}, non_retryable=True)

    @workflow.query
    def progress(self) -> Progress:
        return self._progress

    @workflow.update
    async def reject(self, decision: Decision) -> str:
        self._decision = decision
        self._progress.awaiting_approval = None
        return f"rejected by {decision.by}"

    @reject.validator
    def _may_reject(self, decision: Decision) -> None:
        if self._progress.awaiting_approval is None:
            raise ValueError("this saga is not waiting for an approval")


def test_a_resolution_rejects_the_waiting_saga_and_a_new_firing_starts_a_fresh_run(
    stack: Stack, stack_config: Config
) -> None:
    queue, app = f"webhook-standin-{uuid.uuid4().hex[:8]}", f"shop-{uuid.uuid4().hex[:6]}"
    data = stack_config.model_dump()
    data["temporal"]["task_queue"] = queue
    data["webhook"]["policies"] = [
        {"name": "shop", "match": {"alertname": "OrdersUnreachable"}, "saga": "switchover", "keys": [app],
         "approval": "before-block"}
    ]  # fmt: skip
    config = Config.model_validate(data)
    sagas = TemporalSagas(config)
    dispatcher = Dispatcher(config, sagas, StaticKeys())
    firing = AlertmanagerNotification.model_validate(payload("f1")).notification()
    resolved = AlertmanagerNotification.model_validate(
        {**payload("f1"), "status": "resolved",
         "alerts": [{**payload("f1")["alerts"][0], "status": "resolved"}]}
    ).notification()  # fmt: skip
    saga = f"switchyard:{app}"

    async def scenario() -> None:
        client = await temporal.connect(config)
        worker = Worker(
            client,
            task_queue=queue,
            workflows=[WaitsForApproval],
            workflow_runner=UnsandboxedWorkflowRunner(),
        )
        async with worker:
            answer = await dispatcher.handle(firing)
            assert [(r.outcome, r.saga) for r in answer.results] == [(Outcome.STARTED, saga)]
            for _ in range(100):  # until the stand-in has taken up its first task and waits
                state = await sagas.state(saga)
                if state is not None and state.awaiting_approval:
                    break
                await asyncio.sleep(0.1)
            assert state is not None
            assert (state.status, state.awaiting_approval) == ("running", "before the block")
            assert state.memo["alert"]["group_key"] == GROUP

            first = await client.get_workflow_handle(saga).describe()
            answer = await dispatcher.handle(resolved)
            assert [(r.outcome, r.saga) for r in answer.results] == [(Outcome.REJECTED, saga)]
            with pytest.raises(WorkflowFailureError):
                await client.get_workflow_handle(saga).result()
            ended = await sagas.state(saga)
            assert ended is not None
            assert (ended.status, ended.rejected_on_resolve) == ("failed", True)
            assert not await sagas.reject(saga, Decision("alertmanager:switchyard", "again"))

            answer = await dispatcher.handle(firing)  # inside the cool-down, but rejected on resolve
            assert [(r.outcome, r.saga) for r in answer.results] == [(Outcome.STARTED, saga)]
            fresh = await client.get_workflow_handle(saga).describe()
            assert (fresh.run_id != first.run_id, fresh.status) == (True, WorkflowExecutionStatus.RUNNING)
            await client.get_workflow_handle(saga).terminate("test done")

    asyncio.run(scenario())
