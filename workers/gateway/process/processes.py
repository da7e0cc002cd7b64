"""One gateway served by several processes (``gateway.processes``), so its ceiling grows with cores.

Each process binds the gateway's ports with SO_REUSEPORT and the kernel spreads new connections over
them. To ZooKeeper each is a gateway of its own — registration ``<id>.<i>``, its acknowledgements, its
usage and acknowledged ends — and the virtual broker ids are the ones every gateway shares, so a saga
waits for every process, and a client whose connections land on two processes is served as by a pair
of gateways. Process ``i`` serves ``/metrics`` on ``telemetry.prometheus_listen``'s port + ``i`` (a
scrape must reach one process, not whichever the kernel picks); ``/health`` and ``/ready`` share the
gateway's health port like its Kafka ports. The processes are supervised (:mod:`workers.supervision`).
"""

from __future__ import annotations

from switchyard.config import Config, split_hostport
from workers.supervision import Supervisor, switchyard_command


def member_id(base: str, index: int) -> str:
    """The registration of process ``index`` of gateway ``base``."""
    return f"{base}.{index}"


def member_env(config: Config, index: int) -> dict[str, str]:
    """The environment overrides of process ``index``: its own metrics port."""
    listen = config.telemetry.prometheus_listen
    if not listen:
        return {}
    host, port = split_hostport(listen)
    return {"SWITCHYARD__TELEMETRY__PROMETHEUS_LISTEN": f"{host}:{port + index}"}


def gateway_supervisor(config: Config, config_path: str | None, gateway_id: str, count: int) -> Supervisor:
    """The supervisor of ``count`` processes of gateway ``gateway_id``: this interpreter, the same
    configuration, each told which process it is."""
    command = switchyard_command(config_path, "gateway", "--id", gateway_id)
    return Supervisor(
        "gateway", lambda index: [*command, "--member", str(index)], count, lambda i: member_env(config, i)
    )
