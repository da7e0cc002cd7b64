"""`switchyard worker`: run the sagas and their activities until SIGINT or SIGTERM.

At start it builds what activities share once (:class:`~activities.deps.Deps`), connects to Temporal
and registers the search attributes sagas set. On SIGTERM it stops taking new tasks, lets running
activities finish (up to the grace period; a saga's steps are idempotent, so one cut short is retried
by the next worker), and closes its connections.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import click
from temporalio.worker import Worker

from activities.deps import Deps
from switchyard import temporal
from switchyard.cli.base import config_of
from switchyard.config import Config
from workers.worker.registry import WORKFLOWS, activities

log = logging.getLogger(__name__)
ACTIVITY_THREADS = 32
GRACE = timedelta(seconds=10)
STICKY = timedelta(seconds=2)
"""How long a saga's next decision waits for the worker that made its last one before any worker may take
it (Temporal's default: 5 s): a worker killed mid-saga, clients held, costs this once."""


async def run(config: Config) -> None:
    deps = await asyncio.to_thread(Deps.build, config)
    try:
        client = await temporal.connect(config)
        await temporal.register_search_attributes(client)
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
                await stop.wait()
                log.info("worker stopping: running activities get %ss", GRACE.total_seconds())
    finally:
        await asyncio.to_thread(deps.close)


@click.command("worker")
@click.pass_context
def worker_command(ctx: click.Context) -> None:
    """Run the sagas (switchover, switchback, failover, topic migration) and their steps."""
    asyncio.run(run(config_of(ctx, "worker")))
