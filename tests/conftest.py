"""The shared harness: markers by folder, and one isolated embedded stack per test session."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from switchyard.config import Config, load_config
from switchyard.ledger import Ledger
from switchyard.ledger.kinds import LinkChange
from switchyard.model import LinkState
from switchyard.routing.store import RoutingStore
from switchyard.routing.zk import connect, disconnect
from switchyard.stack import Stack
from tests.helpers.estates import legacy_primary
from tests.helpers.live import Live, deployed, process_warnings
from tests.helpers.otlp import OtlpReceiver
from tests.helpers.services import PostgresServer
from tests.helpers.stacks import routing_root, write_stack_config

_MARKERS = {
    "unit": pytest.mark.unit,
    "integration": pytest.mark.integration,
    "workflows": pytest.mark.integration,  # a real Temporal server, stand-ins for the activities
}


_LONGEST = [
    "test_sagas.py", "test_evacuation.py", "test_mirror.py", "test_verification.py", "test_transactions.py",
    "test_shared_links.py", "test_chaos.py", "test_late_groups.py", "test_gateway_processes.py",
    "test_web_ui.py", "test_partition_migration.py", "test_failover.py", "test_drills.py",
    "test_partition_fault.py", "test_alerting.py", "test_kafka_stack.py", "test_three_brokers.py",
    "test_saga_cli.py", "test_partition_compat.py", "test_gateway_limits.py",
]  # fmt: skip
"""The modules that took longest (`--durations=0`, summed per module, 2026-11-30), in that order. Under
``make test`` pytest-xdist hands out the modules with the most tests first whatever this order says,
which it only breaks ties of; handed out in it (``--no-loadscope-reorder``), the longest ran together at
the start and two of them ran past their time-out (docs/testbed.md, 2026-12-03)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.fspath)).parent.name
        if folder in _MARKERS:
            item.add_marker(_MARKERS[folder])
    items.sort(key=_scheduled)


def _scheduled(item: pytest.Item) -> int:
    """Whole modules go to workers in collection order (``--dist loadfile``): the longest first, then the
    other integration modules, the many short unit tests last to fill the gaps (a stable sort keeps each
    module's own order)."""
    path = Path(str(item.fspath))
    if path.name in _LONGEST and path.parent.name != "unit":
        return _LONGEST.index(path.name)
    return len(_LONGEST) + (1 if path.parent.name == "unit" else 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report carries what Switchyard's processes warned of meanwhile: CI keeps only
    the test's output, and the cause of a failed saga is usually in a gateway's or worker's log."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and "integration" in item.keywords:
        warned = process_warnings(item.config, since=call.start)
        if warned:
            report.sections.append(("Switchyard's processes warned", warned))


@pytest.fixture(scope="session")
def stack_config(tmp_path_factory: pytest.TempPathFactory) -> Config:
    return load_config(write_stack_config(tmp_path_factory.mktemp("stack")), environ={})


@pytest.fixture(scope="session")
def stack(stack_config: Config) -> Iterator[Stack]:
    """ZooKeeper, Temporal and two Kafka clusters on free ports, torn down even when tests fail."""
    embedded = Stack(stack_config)
    try:
        embedded.up()
        yield embedded
    finally:
        embedded.down()


@pytest.fixture(scope="module")
def otlp() -> Iterator[OtlpReceiver]:
    """An OTLP endpoint of this module's own, for the processes it starts to export to."""
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


@pytest.fixture(scope="module")
def ledger_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SQLite ledger of this module's routing root (processes the tests start open it too)."""
    return tmp_path_factory.mktemp("ledger") / "ledger.db"


@pytest.fixture(scope="module")
def routing(stack: Stack, stack_config: Config, ledger_path: Path) -> Iterator[RoutingStore]:
    """A routing root of this module's own, with both clusters registered."""
    with routing_root(stack_config, ledger_path) as store:
        yield store


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """The links a test's body leaves running in its module's routing are deleted after it: the module's
    mirror would otherwise copy them, idle, for the rest of the module — each link's clients fetch,
    refresh and report several times a second, and twenty idle links cost half a core (a mirror's, a
    broker's and ZooKeeper's share, 2026-12-07), which every later test of the module ran beside.
    Links fixtures made stay."""
    store = getattr(item, "funcargs", {}).get("routing")
    before = _links(store) if isinstance(store, RoutingStore) else None
    try:
        return (yield)
    finally:
        if isinstance(store, RoutingStore) and before is not None:
            _delete_new_links(store, before)


def _links(store: RoutingStore) -> set[str] | None:
    try:
        return set(store.snapshot().links)
    except Exception:  # ZooKeeper down (a test that stops it): nothing is cleaned up after this one
        return None


def _delete_new_links(store: RoutingStore, before: set[str]) -> None:
    try:
        left = [link for link in store.snapshot().links.values()
                if link.id not in before and link.state in (LinkState.RUNNING, LinkState.PAUSED)]  # fmt: skip
    except Exception as exc:  # a test that took ZooKeeper down: left as it is
        warnings.warn(f"links left by the test not read: {exc}", stacklevel=1)
        return
    for link in left:
        try:
            store.apply([LinkChange.of(link, LinkState.DELETED)], actor="user:test", reason="test over")
        except Exception as exc:  # moved meanwhile (a saga the test left running): left as it is
            warnings.warn(f"link {link.id} left by the test not deleted: {exc}", stacklevel=1)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.create_database(f"ledger_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[Ledger]:
    opened = Ledger.open(ledger_url)
    yield opened
    opened.close()


@pytest.fixture
def zk(stack: Stack, stack_config: Config) -> Iterator[KazooClient]:
    client = connect(stack_config)
    yield client
    disconnect(client)


@pytest.fixture
def zk_root(zk: KazooClient) -> Iterator[str]:
    """A root of this test's own in the session's ZooKeeper, removed afterwards."""
    root = f"/test-{uuid.uuid4().hex[:12]}"
    yield root
    zk.delete(root, recursive=True)


@pytest.fixture
def store(zk: KazooClient, zk_root: str, ledger: Ledger) -> RoutingStore:
    """A routing store on a fresh root with primary and standby registered; on SQLite and PostgreSQL."""
    return _store(zk, zk_root, ledger)


@pytest.fixture
def sqlite_store(zk: KazooClient, zk_root: str, tmp_path: Path) -> Iterator[RoutingStore]:
    """The same on SQLite only, for tests about ZooKeeper behaviour rather than the ledger."""
    opened = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    yield _store(zk, zk_root, opened)
    opened.close()


def _store(zk: KazooClient, zk_root: str, ledger: Ledger) -> RoutingStore:
    routing = RoutingStore(zk, zk_root, ledger)
    routing.ensure_layout()
    actor = "user:test"
    routing.register_cluster("primary", "primary:9092", actor=actor, reason="test setup")
    routing.register_cluster("standby", "standby:9092", actor=actor, reason="test setup")
    return routing


@pytest.fixture(scope="module")
def live(
    request: pytest.FixtureRequest,
    stack: Stack,
    routing: RoutingStore,
    stack_config: Config,
    ledger_path: Path,
    otlp: OtlpReceiver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Live]:
    """A gateway, a mirror and a worker; they and the CLI export their spans and metrics to ``otlp``. A
    module's ``LIVE_OVERRIDES`` (environment settings) configure its deployment further."""
    overrides = {
        "SWITCHYARD__TELEMETRY__OTLP_ENDPOINT": otlp.endpoint,
        "SWITCHYARD__TELEMETRY__EXPORT_INTERVAL_S": "1",
        **getattr(request.module, "LIVE_OVERRIDES", {}),
    }
    logs = tmp_path_factory.mktemp("live")
    with deployed(stack_config, routing.layout.root, ledger_path, logs, overrides) as deployment:
        yield deployment


@pytest.fixture(scope="module")
def legacy_config(
    stack: Stack, stack_config: Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Config]:
    """The session stack with ``primary`` an Apache Kafka 3.9 cluster in ZooKeeper mode of this module's own
    (``standby`` the session's 4.x), started for the module (tests/helpers/estates.py)."""
    with legacy_primary(stack_config, tmp_path_factory.mktemp("legacy")) as config:
        yield config


@pytest.fixture(scope="module")
def legacy_routing(legacy_config: Config, ledger_path: Path) -> Iterator[RoutingStore]:
    """A routing root of this module's own with ``legacy_config``'s clusters registered."""
    with routing_root(legacy_config, ledger_path) as store:
        yield store


@pytest.fixture(scope="module")
def legacy_live(
    legacy_config: Config,
    legacy_routing: RoutingStore,
    ledger_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Live]:
    """A gateway, a mirror and a worker serving ``legacy_config``'s clusters."""
    logs = tmp_path_factory.mktemp("legacy-live")
    with deployed(legacy_config, legacy_routing.layout.root, ledger_path, logs, {}) as deployment:
        yield deployment
