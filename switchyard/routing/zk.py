"""Connecting to ZooKeeper from the configuration, with errors that say where and why."""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from switchyard.config import Config
from switchyard.errors import RoutingUnavailable


def connect(config: Config, *, timeout_s: float = 15.0) -> KazooClient:
    """A started client; the caller stops and closes it."""
    zk = KazooClient(
        hosts=config.zookeeper.connect,
        timeout=config.zookeeper.session_timeout_s,
        connection_retry=KazooRetry(max_tries=-1, max_delay=2.0),
        command_retry=KazooRetry(max_tries=5, delay=0.2, max_delay=2.0, ignore_expire=False),
    )
    try:
        zk.start(timeout=timeout_s)
    except KazooTimeoutError as exc:
        disconnect(zk)  # start() keeps retrying in the background until stopped
        raise RoutingUnavailable(
            f"ZooKeeper at {config.zookeeper.connect} did not answer within {timeout_s:g}s"
        ) from exc
    return zk


def disconnect(zk: KazooClient) -> None:
    zk.stop()
    zk.close()


def children_data(zk: KazooClient, folder: str) -> dict[str, bytes]:
    """Each child node of ``folder`` and its data; children that go away while read are left out (an
    ephemeral member, a released lock), and a folder that does not exist has none."""
    try:
        names = zk.retry(zk.get_children, folder)
    except NoNodeError:
        return {}
    except KazooException as exc:
        raise RoutingUnavailable(f"ZooKeeper: cannot read {folder}: {exc!r}") from exc
    found = {}
    for name in names:
        try:
            found[name], _ = zk.retry(zk.get, f"{folder}/{name}")
        except NoNodeError:
            continue
        except KazooException as exc:
            raise RoutingUnavailable(f"ZooKeeper: cannot read {folder}/{name}: {exc!r}") from exc
    return found
