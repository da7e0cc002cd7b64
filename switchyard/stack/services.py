"""The services of the embedded stack, derived from the configuration so there is one source of ports.

ZooKeeper listens where ``zookeeper.connect`` points (a node a host: several make an ensemble),
Temporal where ``temporal.address`` points, each cluster's brokers on the addresses of its ``bootstrap``, and,
when ``stack.spark.workers`` asks for a Spark standalone cluster, its master where ``spark.master``
points, with that many workers beside it.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from switchyard.config import Config, split_hostport
from switchyard.errors import StackError
from switchyard.stack import health
from switchyard.stack.brokers import KafkaCluster
from switchyard.stack.health import Health

_ZOOKEEPER_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")


@dataclass(frozen=True)
class Service:
    """A service of the stack: where it listens, how to start it, how to ask whether it works."""

    name: str
    host: str
    port: int
    probe: Callable[[], Health]
    argv: Callable[[], list[str]] | None = None
    """How to start it; None for a service served by another one's process (the Temporal UI)."""
    prepare: Callable[[], None] = field(default=lambda: None)
    link: str | None = None
    served_by: str | None = None
    """The service whose process serves this one, when it has none of its own."""
    env: dict[str, str] = field(default_factory=dict)
    """Set in its environment, on top of the caller's."""

    @property
    def process_name(self) -> str:
        return self.served_by or self.name

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def build(config: Config) -> list[Service]:
    state = config.stack.state_dir
    t_host, t_port = split_hostport(config.temporal.address)
    ui_port = config.temporal_ui_port
    services = zookeepers(config)
    for cluster_id in config.clusters:
        services += kafka_cluster(config, cluster_id)
    services.append(_temporal(state / "temporal", t_host, t_port, ui_port, config.temporal.namespace))
    services.append(
        Service(
            name="temporal-ui",
            host=t_host,
            port=ui_port,
            probe=lambda: health.http(f"http://{t_host}:{ui_port}/"),
            link=config.temporal_ui_url,
            served_by="temporal",
        )
    )
    master = config.spark_master_address
    if config.stack.spark.workers and master is not None:
        services += spark_cluster(config, state / "spark", *master)
    return services


def spark_cluster(config: Config, home: Path, host: str, port: int) -> list[Service]:
    """A standalone master and ``stack.spark.workers`` workers, each with its cores, memory and work
    directory; jobs reach it with ``spark-submit --master spark://host:port``."""
    wanted = config.stack.spark
    ui = wanted.ui_port or port + 1000
    env = {"SPARK_HOME": spark_home(), "SPARK_LOG_DIR": str(home / "logs")}
    master = Service(
        "spark-master",
        host,
        port,
        lambda: health.spark_master(host, ui),
        lambda: [str(Path(spark_home()) / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
                 "--host", host, "--port", str(port), "--webui-port", str(ui)],
        link=f"http://{host}:{ui}",
        env=env,
    )  # fmt: skip
    workers = []
    for i in range(1, wanted.workers + 1):
        work = home / f"worker-{i}"
        workers.append(
            Service(
                f"spark-worker-{i}",
                host,
                ui + i,
                lambda i=i: health.spark_worker(host, ui, ui + i),  # type: ignore[misc]
                lambda i=i, work=work: [  # type: ignore[misc]
                    str(Path(spark_home()) / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker",
                    "--host", host, "--webui-port", str(ui + i), "--cores", str(wanted.worker_cores),
                    "--memory", wanted.worker_memory, "--work-dir", str(work), f"spark://{host}:{port}",
                ],
                lambda work=work: work.mkdir(parents=True, exist_ok=True),  # type: ignore[misc]
                link=f"http://{host}:{ui + i}",
                env=env,
            )
        )  # fmt: skip
    return [master, *workers]


def spark_home() -> str:
    """The Spark that PySpark brings (its ``bin/spark-class`` finds its jars through SPARK_HOME)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise StackError("spark: PySpark is missing (pip install -e '.[embedded]')")
    return str(spec.submodule_search_locations[0])


def zookeepers(config: Config) -> list[Service]:
    """One ZooKeeper node a host of ``zookeeper.connect``: one standalone, or an ensemble of several."""
    hosts = [split_hostport(h) for h in config.zookeeper.connect.partition("/")[0].split(",")]
    state = config.stack.state_dir
    if len(hosts) == 1:
        return [zookeeper(state / "zookeeper", *hosts[0])]
    quorum = config.stack.zookeeper_quorum_ports
    if len(quorum) != 2 * len(hosts):
        raise StackError(
            f"stack.zookeeper_quorum_ports: {len(hosts)} ZooKeeper hosts in zookeeper.connect need "
            f"{2 * len(hosts)} ports (a quorum and an election port each), not {len(quorum)}"
        )
    servers = [f"server.{n}={h}:{quorum[2 * n - 2]}:{quorum[2 * n - 1]}" for n, (h, _) in enumerate(hosts, 1)]
    return [
        zookeeper(state / f"zookeeper-{n}", host, port, name=f"zookeeper-{n}", ensemble=servers, myid=n)
        for n, (host, port) in enumerate(hosts, 1)
    ]


def zookeeper(
    home: Path, host: str, port: int, *, name: str = "zookeeper", ensemble: list[str] | None = None,
    myid: int = 0,
) -> Service:  # fmt: skip
    """A ZooKeeper node: standalone, or with ``ensemble`` (its ``server.N`` lines) the node ``myid``."""

    def prepare() -> None:
        (home / "data").mkdir(parents=True, exist_ok=True)
        if ensemble:
            (home / "data" / "myid").write_text(f"{myid}\n")
        (home / "zoo.cfg").write_text(
            "\n".join(
                [
                    "tickTime=2000",
                    f"dataDir={home / 'data'}",
                    f"clientPort={port}",
                    f"clientPortAddress={host}",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,mntr",
                    "maxClientCnxns=0",
                    *(["initLimit=10", "syncLimit=5", *ensemble] if ensemble else []),
                    "",
                ]
            )
        )

    def argv() -> list[str]:
        java = shutil.which("java")
        if java is None or not Path(_ZOOKEEPER_JARS[0]).exists():
            raise StackError("zookeeper: Java or Debian's zookeeper package is missing (run `make setup`)")
        classpath = ":".join(jar for jar in _ZOOKEEPER_JARS if Path(jar).exists())
        return [
            java,
            "-Xmx256m",
            f"-Dzookeeper.log.dir={home}",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            classpath,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(home / "zoo.cfg"),
        ]

    return Service(name, host, port, lambda: health.zookeeper(host, port), argv, prepare)


def kafka_cluster(config: Config, cluster_id: str) -> list[Service]:
    """One service for each broker of the cluster (Apache Kafka, KRaft, storage kept on disk)."""
    return brokers(KafkaCluster.from_config(config, cluster_id))


def brokers(cluster: KafkaCluster) -> list[Service]:
    probe = health.kafka if cluster.zookeeper is None else health.kafka_with_controller
    return [
        Service(
            cluster.service_name(node),
            host,
            port,
            lambda host=host, port=port: probe(host, port),  # type: ignore[misc]
            lambda node=node: cluster.argv(node),  # type: ignore[misc]
            lambda node=node: cluster.prepare(node),  # type: ignore[misc]
        )
        for node, (host, port) in zip(cluster.node_ids, cluster.addresses, strict=True)
    ]


def _temporal(home: Path, host: str, port: int, ui_port: int, namespace: str) -> Service:
    def argv() -> list[str]:
        cli = health.tool("temporal")
        extra = [] if namespace == "default" else ["--namespace", namespace]
        return [
            cli,
            "server",
            "start-dev",
            "--ip",
            host,
            "--port",
            str(port),
            "--ui-port",
            str(ui_port),
            "--ui-disable-news-fetch",
            "--db-filename",
            str(home / "temporal.db"),
            "--log-level",
            "warn",
            *extra,
        ]

    return Service(
        "temporal",
        host,
        port,
        lambda: health.temporal(f"{host}:{port}"),
        argv,
        lambda: home.mkdir(parents=True, exist_ok=True),
    )
