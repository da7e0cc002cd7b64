"""The embedded stack's Kafka clusters: Apache Kafka in KRaft combined mode, or 3.9.x in ZooKeeper mode,
storage kept on disk.

In KRaft mode each broker of a cluster is a KRaft node that is broker and controller at once, listening
for clients on its address of ``clusters.<id>.bootstrap`` and for the quorum on its ``controllers``
address; its storage is formatted once (copied from a template the storage tool formats once per
version). In ZooKeeper mode the brokers keep the cluster's metadata in the stack's ZooKeeper under
``/kafka-clusters/<cluster>/<cluster id>``, where the cluster's id is written before its first broker
starts (so storage and ZooKeeper never disagree on it, and storage made anew starts from empty metadata,
not an earlier cluster's); nothing is formatted. Storage lives under
``<state_dir>/kafka/<cluster>/node-<id>``, so ``stack down`` and ``stack up``, or a broker killed and
started again, keep every record. The cluster's identity (its id, the version that made its storage,
its metadata mode, its controller listeners) is kept beside the nodes in ``cluster.json``; a
configuration that asks for another version or mode than the one that made the storage is refused,
naming both, rather than started on storage it may not read.

Sized for two cores shared with everything else: a small heap, one GC thread of each kind, two network
and two I/O threads, one partition and as many replicas as brokers (up to 3) for the internal topics,
no delay before a group's first rebalance, and retention checked every few seconds so tests can watch
it act.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from switchyard.config import Config, split_hostport
from switchyard.errors import StackError
from switchyard.stack.distribution import KafkaDistribution
from switchyard.stack.process import tail

JVM_OPTIONS = ["-Xms64m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:ParallelGCThreads=1",
               "-XX:ConcGCThreads=1", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError",
               "-Djava.awt.headless=true"]  # fmt: skip
"""Small heap, one GC thread of each kind, and the client compiler only: on the testbed a broker then
takes 4.2 s of CPU to start instead of 6.0, and a third less while it warms up (what a stack of
short-lived brokers on two cores spends most); 2.3 s with the class archive as well."""


@dataclass(frozen=True)
class Identity:
    """What a cluster's storage was made with, kept beside it in ``cluster.json``."""

    cluster_id: str
    version: str
    controllers: list[tuple[str, int]]
    """Empty in ZooKeeper mode."""
    metadata: str = "kraft"


_KAZOO_LOG = logging.getLogger(f"{__name__}.zookeeper")
_KAZOO_LOG.setLevel(logging.ERROR)  # "connection refused" while ZooKeeper, just started, comes up
ZK_CHROOT = "/kafka-clusters"
"""Where the stack's clusters in ZooKeeper mode keep their metadata, one znode each, apart from
Switchyard's own ``zookeeper.root``."""
_ZK_SESSION_MS = 6000
"""A broker's ZooKeeper session (18 s by default): a broker killed holds its registration until the
session expires, and one started again before that refuses to start."""


@dataclass(frozen=True)
class KafkaCluster:
    """One cluster of the stack as configured: its brokers' addresses, version and storage."""

    cluster_id: str
    dist: KafkaDistribution
    addresses: list[tuple[str, int]]
    controllers: list[tuple[str, int]] | None
    home: Path
    heap: str
    jvm_options: list[str] = field(default_factory=list)
    properties: Mapping[str, object] = field(default_factory=dict)
    zookeeper: str | None = None
    """In ZooKeeper mode: the stack's ensemble and the cluster's znode; its brokers' ``zookeeper.connect``
    adds the cluster id (storage made anew never meets an earlier cluster's metadata there)."""

    @classmethod
    def from_config(cls, config: Config, cluster_id: str) -> KafkaCluster:
        wanted = config.stack.cluster(cluster_id)
        listed = [split_hostport(a) for a in config.clusters[cluster_id].bootstrap.split(",")]
        kafka = config.stack.kafka
        return cls(
            cluster_id=cluster_id,
            dist=KafkaDistribution(wanted.version or kafka.version, config.stack.kafka_dist_dir),
            addresses=listed[: wanted.brokers],
            controllers=[split_hostport(a) for a in wanted.controllers.split(",")]
            if wanted.controllers
            else None,
            home=config.stack.state_dir / "kafka" / cluster_id,
            heap=kafka.heap,
            jvm_options=list(kafka.jvm_options),
            properties=dict(wanted.properties),
            zookeeper=f"{config.zookeeper.connect.partition('/')[0]}{ZK_CHROOT}/{cluster_id}"
            if wanted.metadata == "zookeeper"
            else None,
        )

    @property
    def metadata(self) -> str:
        return "kraft" if self.zookeeper is None else "zookeeper"

    @property
    def node_ids(self) -> list[int]:
        return list(range(1, len(self.addresses) + 1))

    def service_name(self, node: int) -> str:
        return f"kafka-{self.cluster_id}" if len(self.addresses) == 1 else f"kafka-{self.cluster_id}-{node}"

    def node_dir(self, node: int) -> Path:
        return self.home / f"node-{node}"

    def prepare(self, node: int) -> None:
        """Resolve the jars, fix the cluster's identity, format this node's storage unless it holds
        some already, and write its properties."""
        self.dist.ensure()
        identity = self._identity()
        data = self.node_dir(node) / "data"
        properties = self.node_dir(node) / "server.properties"
        properties.parent.mkdir(parents=True, exist_ok=True)
        properties.write_text(self.server_properties(node, identity.controllers, data, identity.cluster_id))
        if self.zookeeper is not None:
            self._ready_in_zookeeper(f"{self.zookeeper}/{identity.cluster_id}", identity.cluster_id, node)
        elif not (data / "meta.properties").exists():
            self._format(node, identity.cluster_id, properties)

    def argv(self, node: int) -> list[str]:
        return [*self._java(node), "kafka.Kafka", str(self.node_dir(node) / "server.properties")]

    def _java(self, node: int) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise StackError(f"{self.service_name(node)}: Java is missing (run `make setup`)")
        logging = self.dist.logging_options(self.node_dir(node))
        archive = self.dist.class_archive(java)
        shared = [f"-XX:SharedArchiveFile={archive}"] if archive.exists() else []
        return [
            java,
            f"-Xmx{self.heap}",
            *JVM_OPTIONS,
            *shared,
            *self.jvm_options,
            *logging,
            "-cp",
            self.dist.classpath,
        ]

    def server_properties(
        self, node: int, controllers: list[tuple[str, int]], data: Path, cluster_id: str = ""
    ) -> str:
        host, port = self.addresses[node - 1]
        count = len(self.addresses)
        replicas = min(3, count)
        in_sync = min(2, count)
        settings: dict[str, object] = {
            "advertised.listeners": f"PLAINTEXT://{host}:{port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": data,
            "num.partitions": 1,
            "default.replication.factor": replicas,
            "auto.create.topics.enable": "false",
            "offsets.topic.num.partitions": 1,
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.num.partitions": 1,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": in_sync,
            "group.initial.rebalance.delay.ms": 0,
            "num.network.threads": 2,
            "num.io.threads": 2,
            "background.threads": 2,
            "num.replica.fetchers": 1,
            "num.recovery.threads.per.data.dir": 1,
            "log.cleaner.threads": 1,
            "log.cleaner.dedupe.buffer.size": 8 * 1024 * 1024,
            "log.initial.task.delay.ms": 1000,
            "log.retention.check.interval.ms": 2000,
        }
        if self.zookeeper is not None:
            settings |= {
                "broker.id": node,
                "zookeeper.connect": f"{self.zookeeper}/{cluster_id}",
                "zookeeper.session.timeout.ms": _ZK_SESSION_MS,
                "listeners": f"PLAINTEXT://{host}:{port}",
            }
        else:
            c_host, c_port = controllers[node - 1]
            voters = ",".join(f"{i}@{h}:{p}" for i, (h, p) in zip(self.node_ids, controllers, strict=True))
            settings |= {
                "process.roles": "broker,controller",
                "node.id": node,
                "controller.quorum.voters": voters,
                "controller.listener.names": "CONTROLLER",
                "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{c_host}:{c_port}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "metadata.max.idle.interval.ms": 5000,  # the controller's no-op records: idle CPU -35%
            }
        if self.dist.major >= 4:
            settings["share.coordinator.state.topic.num.partitions"] = 1
            settings["share.coordinator.state.topic.replication.factor"] = replicas
            settings["share.coordinator.state.topic.min.isr"] = in_sync
        settings.update(self.properties)
        return "".join(f"{k}={_text(v)}\n" for k, v in settings.items())

    @staticmethod
    def _ready_in_zookeeper(connect: str, cluster_id: str, node: int) -> None:
        """Write the cluster's id where its brokers read it (``<chroot>/cluster/id``) unless there, and
        wait until the node's registration of an earlier run is gone. A broker whose storage names another
        id than ZooKeeper's refuses to start, so the id is the stack's own, kept in ``cluster.json``,
        whichever of the two was made first. A broker killed holds its registration (an ephemeral node)
        until its session expires, and one started before that exits (NodeExists). ZooKeeper may have
        been started a moment ago: waits for it up to 60 s."""
        hosts, _, chroot = connect.partition("/")
        client = KazooClient(hosts=hosts, timeout=5.0, logger=_KAZOO_LOG)
        try:
            client.start(timeout=60)
            path = f"/{chroot}/cluster/id"
            if client.exists(path) is None:
                value = json.dumps({"version": "1", "id": cluster_id}).encode()
                client.create(path, value, makepath=True)
            deadline = time.monotonic() + _ZK_SESSION_MS / 1000 + 10
            while client.exists(f"/{chroot}/brokers/ids/{node}") is not None:
                if time.monotonic() > deadline:
                    raise StackError(
                        f"kafka broker {node} at {connect}: still registered in ZooKeeper after its session "
                        "should have expired; is it running outside the stack?"
                    )
                time.sleep(0.2)
        except (KazooException, TimeoutError) as exc:  # kazoo's start times out with the builtin
            said = f"kafka cluster at {connect}: cannot ready it in ZooKeeper: {exc!r}"
            raise StackError(said) from exc
        finally:
            client.stop()
            client.close()

    def _identity(self) -> Identity:
        """The cluster id, the version that formatted its storage and its controller listeners, fixed
        at its first start; a later start that asks for another version is refused."""
        path = self.home / "cluster.json"
        try:
            kept = json.loads(path.read_text())
            identity = Identity(
                kept["cluster_id"],
                kept["version"],
                [(str(h), int(p)) for h, p in kept["controllers"]],
                kept.get("metadata", "kraft"),
            )
        except FileNotFoundError:
            cluster_id = new_cluster_id()
            if self.zookeeper is not None:
                controllers = []
            else:
                controllers = self.controllers or free_addresses(self.addresses[0][0], len(self.addresses))
            identity = Identity(cluster_id, self.dist.version, controllers, self.metadata)
            self.home.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(dataclasses.asdict(identity)))
            tmp.replace(path)
            return identity
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StackError(f"kafka-{self.cluster_id}: cannot read {path}: {exc!r}") from exc
        if identity.metadata != self.metadata:
            raise StackError(
                f"kafka-{self.cluster_id}: its storage in {self.home} was made in {identity.metadata} mode, "
                f"and the configuration asks for {self.metadata}; set "
                f"stack.clusters.{self.cluster_id}.metadata back, or remove {self.home} to start the cluster "
                "empty"
            )
        if self.zookeeper is None and len(identity.controllers) != len(self.addresses):
            raise StackError(
                f"kafka-{self.cluster_id}: its storage in {self.home} was formatted for "
                f"{len(identity.controllers)} brokers, and the configuration asks for {len(self.addresses)}; "
                f"set the number back, or remove {self.home} to start the cluster empty"
            )
        if identity.version != self.dist.version:
            raise StackError(
                f"kafka-{self.cluster_id}: its storage in {self.home} was formatted by Apache Kafka "
                f"{identity.version}, and the configuration asks for {self.dist.version}; set the "
                f"version back, or remove {self.home} to start the cluster empty"
            )
        return dataclasses.replace(identity, controllers=self.controllers or identity.controllers)

    def _format(self, node: int, cluster_id: str, properties: Path) -> None:
        """Format this node's storage: a copy of the version's formatted template, its identity written
        in (a JVM started for the storage tool costs more CPU than the broker's first seconds, and the
        test suite makes dozens of clusters); a cluster with settings of its own is formatted by the
        tool itself, as those may change what it writes."""
        if self.properties:
            self._run_storage_tool(node, cluster_id, properties)
            return
        data = self.node_dir(node) / "data"
        shutil.copytree(self._template(), data)
        (data / "meta.properties").write_text(
            f"node.id={node}\ndirectory.id={new_cluster_id()}\nversion=1\ncluster.id={cluster_id}\n"
        )

    def _template(self) -> Path:
        """The storage the tool formats for a static quorum's node (a metadata checkpoint of the
        version's features, and meta.properties), made once per version beside its jars. Only
        ``meta.properties`` tells clusters and nodes apart: the checkpoint differs by its timestamps."""
        template = self.dist.folder / "formatted"
        if template.exists():
            return template
        made = Path(tempfile.mkdtemp(prefix="formatting-", dir=self.dist.folder))
        try:
            properties = made / "server.properties"
            properties.write_text(
                "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
                "controller.listener.names=CONTROLLER\n"
                "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n"
                f"log.dirs={made / 'data'}\n"
            )
            self._run_storage_tool(1, new_cluster_id(), properties)
            try:
                (made / "data").rename(template)
            except OSError:  # another process made it meanwhile
                if not template.exists():
                    raise
        finally:
            shutil.rmtree(made, ignore_errors=True)
        return template

    def _run_storage_tool(self, node: int, cluster_id: str, properties: Path) -> None:
        try:
            done = subprocess.run(
                [*self._java(node), "kafka.tools.StorageTool", "format",
                 "-t", str(cluster_id), "-c", str(properties), "--ignore-formatted"],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise StackError(f"{self.service_name(node)}: formatting its storage took over 120 s") from None
        if done.returncode != 0:
            said = tail(done.stdout + done.stderr, 8)
            raise StackError(f"{self.service_name(node)}: formatting its storage failed:\n{said}")


def new_cluster_id() -> str:
    """16 random bytes in URL-safe base64, as Kafka's own ``random-uuid`` makes them: never starting
    with '-', which the storage formatter would read as an option (one id in 32 did, and its cluster
    could not be formatted)."""
    while True:
        found = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not found.startswith("-"):
            return found


def free_addresses(host: str, count: int) -> list[tuple[str, int]]:
    """``count`` ports free on ``host`` now (the kernel's choice, from its ephemeral range)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((host, 0))
        return [(host, sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
