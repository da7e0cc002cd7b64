"""`switchyard webhook`: receive alert notifications on ``webhook.listen`` until SIGINT or SIGTERM.

At start it reads the receivers' secrets and checks the policies (a problem stops it, naming the key);
Temporal and ZooKeeper are reached at the first notification that needs them, so the receiver starts —
and answers 503, which Alertmanager retries — while they are away. On SIGTERM uvicorn stops taking
connections, lets requests under way finish (up to ``GRACE_S``), and the command ends with exit code 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from types import FrameType

import click
import uvicorn

from switchyard.alerts.auth import authenticators
from switchyard.alerts.dispatch import Dispatcher
from switchyard.cli.base import config_of
from switchyard.config import Config, split_hostport
from switchyard.errors import ConfigError
from workers.webhook.app import Receiver, create_app
from workers.webhook.sagas import TemporalSagas, ZooKeeperKeys

log = logging.getLogger(__name__)
GRACE_S = 10
KEEP_ALIVE_S = 5
MAX_CONNECTIONS = 100
"""Past this many connections at once, uvicorn answers 503 (Alertmanager sends again later)."""


def build(config: Config) -> Receiver:
    """The receiver on Temporal and ZooKeeper; ConfigError naming the key of what cannot serve."""
    auth = authenticators(config)
    if not auth:
        raise ConfigError("webhook: no receiver is configured: set webhook.alertmanager or webhook.grafana")
    sagas, keys = TemporalSagas(config), ZooKeeperKeys(config)
    open_to_all = [f"webhook.{name}" for name, section in (
        ("alertmanager", config.webhook.alertmanager), ("grafana", config.webhook.grafana),
    ) if section is not None and section.insecure]  # fmt: skip
    if open_to_all:
        log.warning("%s: insecure, takes notifications from anyone", ", ".join(open_to_all))
    if not config.webhook.policies:
        log.warning("webhook.policies is empty: every notification is answered 'no policy matched'")

    async def close() -> None:
        await asyncio.to_thread(keys.close)

    return Receiver(config, Dispatcher(config, sagas, keys), auth, sagas, close)


def _let_uvicorn_stop(_signum: int, _frame: FrameType | None) -> None:
    """uvicorn raises the signal it stopped for again once it has stopped, with the handler it found
    installed; this one makes that a no-op, so the command returns (and exits 0) instead of dying."""


@click.command("webhook")
@click.pass_context
def webhook_command(ctx: click.Context) -> None:
    """Take Alertmanager and Grafana notifications; start and reject the sagas webhook.policies name."""
    config = config_of(ctx, "webhook")
    receiver = build(config)
    host, port = split_hostport(config.webhook.listen)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(receiver), host=host, port=port, log_config=None, access_log=False,
            timeout_keep_alive=KEEP_ALIVE_S, timeout_graceful_shutdown=GRACE_S,
            limit_concurrency=MAX_CONNECTIONS, server_header=False, lifespan="on",
        )
    )  # fmt: skip
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _let_uvicorn_stop)
    log.info("webhook receiver on http://%s:%d: %s", host, port, ", ".join(f"/{s}" for s in receiver.auth))
    server.run()
