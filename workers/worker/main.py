"""`switchyard worker`: run the sagas and their activities until SIGINT or SIGTERM.

At start it builds what activities share once (:class:`~activities.deps.Deps`) and starts each
cluster's clients in the background (:meth:`~activities.deps.Deps.warm`), connects to Temporal,
registers the search attributes sagas set and keeps the partition migrations' aging schedule
(:mod:`switchyard.moves.aging_schedule`). On SIGTERM it stops taking new tasks, lets running
activities finish (up to the grace period; a saga's steps are idempotent, so one cut short is retried
by the next worker), and closes its connections.

It also exports how many sagas of its task queue wait for an approval (:class:`ApprovalWatch`); saga
outcomes and durations are counted where a saga's end is recorded (:mod:`activities.records`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import click
from opentelemetry import metrics
from temporalio.client import Client
from temporalio.worker import Worker

from activities.deps import Deps
from switchyard import temporal
from switchyard.cli.base import config_of
from switchyard.config import Config
from switchyard.moves import aging_schedule
from switchyard.sagas.ids import KIND_ATTRIBUTE, PHASE_ATTRIBUTE
from switchyard.sagas.requests import Kind
from workers.supervision import Supervisor, die_with_supervisor, say_serving, switchyard_command
from workers.worker.registry import WORKFLOWS, activities

log = logging.getLogger(__name__)
ACTIVITY_THREADS = 32
GRACE = timedelta(seconds=10)
STICKY = timedelta(seconds=0.5)
"""How long a saga's next decision waits for the worker that made its last one before any worker may take
it (Temporal's default: 5 s): a worker killed mid-saga, clients held, costs this once. A live worker's
poller takes it at once; one missed costs a replay of the history by whichever worker takes it."""
APPROVALS_EVERY_S = 15.0
"""How often the sagas waiting for an approval are counted: one visibility query each time."""
AWAITING_APPROVAL = "awaiting approval"
"""The phase a saga shows (search attribute ``SwitchyardPhase``) while it waits for an approval."""


class ApprovalWatch:
    """The sagas of one task queue that wait for an approval, per kind: how many, and how long ago the
    oldest of them started (an upper bound of its wait; Temporal keeps no time of the phase change).

    Read from Temporal's visibility every ``APPROVALS_EVERY_S`` by the worker, because the sagas cannot
    say it themselves: workflow code must replay, so it exports nothing. Every worker of a queue reports
    the same figures; take ``max`` across them.
    """

    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.query = (
            f"{PHASE_ATTRIBUTE} = '{AWAITING_APPROVAL}' AND ExecutionStatus = 'Running' "
            f"AND TaskQueue = '{task_queue}'"
        )
        self.waiting: dict[str, list[float]] = {}
        """Kind -> the start times (Unix seconds) of its sagas waiting now; empty until the first read."""
        meter = metrics.get_meter("switchyard.worker")
        meter.create_observable_gauge(
            "switchyard.sagas.awaiting_approval",
            callbacks=[self._observe_count],
            description="sagas waiting for an approval, by kind",
        )
        meter.create_observable_gauge(
            "switchyard.sagas.awaiting_approval_oldest",
            unit="s",
            callbacks=[self._observe_oldest],
            description="seconds since the oldest saga waiting for an approval started, by kind (0: none)",
        )

    async def run(self) -> None:
        """Read the waiting sagas every ``APPROVALS_EVERY_S`` until cancelled; a failed read keeps the
        last figures (Temporal away is another alert's business)."""
        while True:
            try:
                await self.read()
            except Exception as exc:
                log.debug("sagas awaiting approval not counted: %r", exc)
            await asyncio.sleep(APPROVALS_EVERY_S)

    async def read(self) -> None:
        waiting: dict[str, list[float]] = {kind.value: [] for kind in Kind}
        async for found in self.client.list_workflows(self.query, rpc_timeout=timedelta(seconds=10)):
            kind = found.search_attributes.get(KIND_ATTRIBUTE) or ["-"]
            waiting.setdefault(str(kind[0]), []).append(found.start_time.timestamp())
        self.waiting = waiting

    def _observe_count(self, _options: metrics.CallbackOptions) -> list[metrics.Observation]:
        return [metrics.Observation(len(starts), {"kind": k}) for k, starts in self.waiting.items()]

    def _observe_oldest(self, _options: metrics.CallbackOptions) -> list[metrics.Observation]:
        now = time.time()
        return [
            metrics.Observation(round(now - min(starts), 3) if starts else 0.0, {"kind": k})
            for k, starts in self.waiting.items()
        ]


async def run(config: Config) -> None:
    deps = await asyncio.to_thread(Deps.build, config)
    deps.warm()
    approvals: asyncio.Task[None] | None = None
    try:
        client = await temporal.connect(config)
        await temporal.register_search_attributes(client)
        try:
            log.info("%s", await aging_schedule.keep(client, config))
        except Exception:  # the sagas run without it; aging waits for the next start (or the CLI)
            log.exception("the partition migrations' aging schedule could not be kept")
        approvals = asyncio.create_task(ApprovalWatch(client, config.temporal.task_queue).run())
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        steps = activities(deps)
        with ThreadPoolExecutor(ACTIVITY_THREADS, thread_name_prefix="activity") as threads:
            worker = Worker(
                client,
                task_queue=config.temporal.task_queue,
                workflows=WORKFLOWS,
                activities=steps,
                activity_executor=threads,
                graceful_shutdown_timeout=GRACE,
                sticky_queue_schedule_to_start_timeout=STICKY,
            )
            async with worker:
                queue = config.temporal.task_queue
                log.info(
                    "worker on task queue %s: %d workflows, %d activities", queue, len(WORKFLOWS), len(steps)
                )
                say_serving()
                await stop.wait()
                log.info("worker stopping: running activities get %ss", GRACE.total_seconds())
    finally:
        if approvals is not None:
            approvals.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await approvals
        await asyncio.to_thread(deps.close)


@click.command("worker")
@click.option("--supervised", is_flag=True, hidden=True, help="Be the process the command supervises.")
@click.pass_context
def worker_command(ctx: click.Context, supervised: bool) -> None:
    """Run the sagas (switchover, switchback, failover, topic migration) and their steps, in a process the
    command supervises (workers/supervision.py): one that dies mid-step is started again, and Temporal
    gives it the saga back."""
    if not supervised:
        config_of(ctx, "worker-supervisor")  # a bad configuration stops the command here, its key named
        command = switchyard_command(ctx.find_root().params.get("config_path"), "worker", "--supervised")
        sys.exit(Supervisor("worker", lambda _index: command, 1).run())
    die_with_supervisor()
    asyncio.run(run(config_of(ctx, "worker")))
