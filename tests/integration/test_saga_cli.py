"""The saga commands refuse what they cannot act on the CLI's way — one ``error:`` line and the exit code
— on the session stack's Temporal and ZooKeeper with a real worker: decisions and cancellations of sagas
that do not exist or have ended, and switchbacks of keys that have no switch to return from."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata

from switchyard import temporal
from switchyard.config import Config, load_config
from switchyard.keys import BindingKey
from switchyard.model import Link, LinkState
from switchyard.routing import BindingChange, LinkChange, RoutingStore
from switchyard.routing.locks import SagaLocks
from switchyard.stack import Stack
from tests.helpers.processes import WorkerProcess

ACTOR = "user:test"


@dataclass
class Operator:
    """The CLI as a process of its own, as an operator runs it, on the module's routing root, ledger and
    task queue; ``store`` sets up the routing state it finds."""

    config: Config
    env: dict[str, str]
    store: RoutingStore

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "switchyard", "--config", str(self.config.source), *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


@pytest.fixture(scope="module")
def run(
    stack: Stack,
    stack_config: Config,
    routing: RoutingStore,
    ledger_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    """The CLI, and a worker that runs its sagas (no gateway, no mirror: these sagas end at their plan)."""
    env = {
        "SWITCHYARD__ZOOKEEPER__ROOT": routing.layout.root,
        "SWITCHYARD__LEDGER__URL": f"sqlite:///{ledger_path}",
        "SWITCHYARD__TEMPORAL__TASK_QUEUE": f"sagacli-{uuid.uuid4().hex[:8]}",
    }
    assert stack_config.source is not None
    worker = WorkerProcess(
        stack_config.source, root=routing.layout.root, name="worker-sagacli",
        log=tmp_path_factory.mktemp("sagacli") / "worker.log", overrides=env,
    )  # fmt: skip
    worker.start()
    yield Operator(stack_config, env, routing)
    worker.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def refused(done: subprocess.CompletedProcess[str], code: int, message: str) -> None:
    out = done.stdout + done.stderr
    assert (done.returncode, "Traceback" in out) == (code, False), out
    assert message in out, out


# ---- decisions and cancellations (issue 19, item 5)


def terminated_saga(config: Config) -> str:
    """A saga that has ended: started on a task queue no worker polls, then terminated (as from the Web
    UI, which runs no compensation)."""
    saga = f"switchyard:{unique('ended')}"

    async def start_and_end() -> None:
        client = await temporal.connect(config)
        handle = await client.start_workflow("Switchover", {"keys": []}, id=saga, task_queue="nobody-polls")
        await handle.terminate(reason="stopped from outside")

    asyncio.run(start_and_end())
    return saga


@pytest.mark.parametrize("command", ["approve", "reject", "cancel"])
def test_deciding_or_cancelling_a_saga_temporal_does_not_know_names_it_and_exits_8(
    run: Operator, command: str
) -> None:
    saga = f"switchyard:{unique('nosuch')}"
    refused(run("sagas", command, saga), 8, f"error: no saga {saga} in Temporal (switchyard sagas list)")


def test_deciding_or_cancelling_a_saga_that_has_ended_says_so_and_exits_8(
    run: Operator, stack_config: Config
) -> None:
    saga = terminated_saga(stack_config)
    for command in ("approve", "reject", "cancel"):
        refused(
            run("sagas", command, saga),
            8,
            f"error: saga {saga} has ended (terminated): nothing to {command} "
            f"(switchyard sagas show '{saga}')",
        )


def test_unlock_releases_the_locks_of_sagas_that_ended_or_that_temporal_does_not_know(
    run: Operator, stack_config: Config
) -> None:
    ended, unknown = terminated_saga(stack_config), f"switchyard:{unique('nosuch')}"
    shop, audit = unique("shop"), unique("audit")
    locks = SagaLocks(run.store.zk, run.store.layout)
    locks.acquire(BindingKey(shop), ended)
    locks.acquire(BindingKey(audit), unknown)
    done = run("sagas", "unlock", shop, audit)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{shop}: released the lock of saga {ended} (terminated)" in done.stdout
    assert f"{audit}: released the lock of saga {unknown} (unknown to Temporal)" in done.stdout


# ---- a switchback needs a switch to return from (issue 19, item 6)


def link_of(store: RoutingStore, link_id: str) -> Link:
    link = store.link(link_id)
    assert link is not None
    return link


def switched(store: RoutingStore, link_id: str, *keys: str, to: str) -> int:
    """What a switch's flip writes, in one fenced change: the keys bound to ``to``, the link promoted."""
    changes = []
    for text in keys:
        key = BindingKey.parse(text)
        bound = store.binding(key)
        changes.append(BindingChange(key, bound.epoch if bound else 0, to))
    promoted = LinkChange.of(link_of(store, link_id), LinkState.PROMOTED)
    return store.apply([*changes, promoted], actor=ACTOR, reason="flip")


def test_a_switchback_of_keys_that_never_moved_is_refused_dry_run_or_not(run: Operator) -> None:
    app, bound, p2s = unique("nosuchapp"), unique("orders"), unique("p2s")
    run.store.create_link(p2s, "primary", "standby", actor=ACTOR, reason="t")
    never = (
        f"no switch to return from: {app} never moved (no binding routes it; the default cluster primary "
        "does). A move elsewhere is a switchover"
    )
    refused(run("switchback", app, "--dry-run"), 5, f"refused: {never}")
    refused(run("switchback", app, "--wait"), 8, never)

    run.store.set_binding(BindingKey(bound), "primary", actor=ACTOR, reason="t")
    out = (
        f"no switch to return from: link {p2s} reverses no link; a move to standby along it is a "
        "switchover, not a switchback"
    )
    refused(run("switchback", bound, "--link", p2s, "--dry-run"), 5, f"refused: {out}")
    refused(run("switchback", bound, "--link", p2s, "--wait"), 8, out)


def test_a_switchback_returns_only_what_the_switch_moved_and_only_once(run: Operator) -> None:
    store = run.store
    app, other, p2s, s2p = unique("orders"), unique("audit"), unique("p2s"), unique("s2p")
    store.create_link(p2s, "primary", "standby", actor=ACTOR, reason="t")
    store.set_binding(BindingKey(other), "standby", actor=ACTOR, reason="there before the switch")
    over = switched(store, p2s, app, to="standby")
    store.create_link(s2p, "standby", "primary", reverse_of=p2s, actor=ACTOR, reason="t")

    # the switch's keys may go back (the plan then looks at the link's topics and mirror, not set up here;
    # an instance nobody saw is forced)
    back = run("switchback", app, f"{app}@host-1", "--link", s2p, "--force", "--dry-run")
    assert f"ok: the keys return from the switch along {p2s} (epoch {over})" in back.stdout, back.stdout
    refused(
        run("switchback", other, "--link", s2p, "--dry-run"),
        5,
        f"no switch to return from: {other} (epoch {over - 1}) on standby since before the switch along "
        f"{p2s} (epoch {over}), which did not move it",
    )
    # once the promoted link is removed, the ledger still knows the switch
    store.apply([LinkChange.of(link_of(store, p2s), LinkState.DELETED)], actor=ACTOR, reason="t")
    back = run("switchback", app, "--link", s2p, "--dry-run")
    assert f"ok: the keys return from the switch along {p2s} (epoch {over})" in back.stdout, back.stdout

    switched(store, s2p, app, to="primary")  # the switchback's flip, and the link it leaves
    p2s_again = unique("p2s-e9")
    store.create_link(p2s_again, "primary", "standby", reverse_of=s2p, actor=ACTOR, reason="t")
    refused(
        run("switchback", app, "--link", p2s_again, "--dry-run"),
        5,
        f"no switch to return from: {s2p} was a switch back already, so link {p2s_again} leads out again; "
        "a move to standby along it is a switchover, not a switchback",
    )
    over_again = run("switchover", app, "--link", p2s_again, "--dry-run")
    assert "no switch to return from" not in over_again.stdout, over_again.stdout
    assert f"ok: link {p2s_again} (primary -> standby) is running" in over_again.stdout, over_again.stdout


def test_status_shows_the_estate_and_names_what_it_could_not_read(run: Operator) -> None:
    app = f"orders-{uuid.uuid4().hex[:6]}"
    run.store.set_binding(BindingKey.for_app(app), "primary", actor=ACTOR, reason="t")
    shown = run("status")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    primary = next(line for line in lines if line.startswith("primary "))
    assert re.match(r"primary +active +yes \(127\.0\.0\.1:\d+\) +(\d+ \w+, )*\d+ active", primary), primary
    assert any(line.startswith("LINK") or line == "no link" for line in lines)
    assert "no gateway registered" in lines
    assert any(
        re.fullmatch(
            r"who uses what: \d+ applications, \d+ topics seen .* within 7d \(switchyard usage\)", line
        )
        for line in lines
    )
    assert any(line.startswith("SAGA") or line == "no saga running" for line in lines)

    elsewhere = {**run.env, "SWITCHYARD__TEMPORAL__ADDRESS": "127.0.0.1:1"}
    away = Operator(run.config, elsewhere, run.store)("status")
    assert away.returncode == 1
    assert "sagas: Temporal not asked" in away.stdout
    assert "CLUSTER" in away.stdout  # the rest is still shown


def test_a_refused_saga_shows_its_reason_in_the_web_ui_not_a_stack_trace(
    run: Operator, stack_config: Config
) -> None:
    """What the workflow's page shows: the failure's message is the refusal, with no Python stack trace and
    no chain of causes under it; its current details say it was refused and why."""
    app = unique("nolink")
    refused(run("switchover", app, "--to", "nowhere", "--force", "--wait"), 8, "refused")
    config = load_config(stack_config.source, environ={**os.environ, **run.env})

    async def ended() -> tuple[Any, str]:
        client = await temporal.connect(config)
        handle = client.get_workflow_handle(f"switchyard:{app}")
        history = await handle.fetch_history()
        failed = [e for e in history.events if e.HasField("workflow_execution_failed_event_attributes")]
        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        return failed[-1].workflow_execution_failed_event_attributes.failure, metadata.current_details

    failure, details = asyncio.run(ended())
    assert failure.message.startswith("no link"), failure.message
    assert (failure.stack_trace, failure.HasField("cause")) == ("", False)
    assert details.startswith("**refused**"), details
