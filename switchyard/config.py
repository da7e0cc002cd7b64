"""The one configuration file every Switchyard process reads, validated before anything starts.

The file is YAML (``switchyard.yaml``; the path comes from ``--config``, then ``$SWITCHYARD_CONFIG``, then
``./switchyard.yaml``). Any key can be overridden from the environment: ``SWITCHYARD__TEMPORAL__ADDRESS``
sets ``temporal.address``; the value is read as YAML, so numbers and lists work. Relative paths in the
file are taken relative to the file, not to the working directory, so a config means the same wherever
it is used from.

Error handling: every problem — unreadable file, bad YAML, unknown key, wrong type, a reference to a
cluster that is not defined — is raised as one :class:`~switchyard.errors.ConfigError` whose message
names the file, each offending key, and, for overrides, the environment variable it came from.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from switchyard.errors import ConfigError
from switchyard.keys import BindingKey

CONFIG_ENV = "SWITCHYARD_CONFIG"
OVERRIDE_PREFIX = "SWITCHYARD__"
DEFAULT_CONFIG_NAME = "switchyard.yaml"


def split_hostport(value: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` too) and check the port; raises ValueError with the reason."""
    host, sep, port_text = value.strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected host:port, got {value!r}")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"port must be a number from 1 to 65535, got {port_text!r}")
    return host.strip("[]"), int(port_text)


def _hostport(value: str) -> str:
    split_hostport(value)
    return value.strip()


def _hostport_list(value: str) -> str:
    for part in value.split(","):
        split_hostport(part)
    return value.strip()


def _zk_connect(value: str) -> str:
    hosts, _, _chroot = value.partition("/")
    _hostport_list(hosts)
    return value.strip()


def _znode_path(value: str) -> str:
    if not value.startswith("/") or value.endswith("/") or "//" in value:
        raise ValueError(f"must be an absolute ZooKeeper path without a trailing '/', got {value!r}")
    return value


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression ({exc})") from exc
    return value


def _sql_url(value: str) -> str:
    try:
        make_url(value)
    except ArgumentError as exc:
        raise ValueError(f"not a SQLAlchemy database URL ({exc})") from exc
    return value


HostPort = Annotated[str, AfterValidator(_hostport)]
HostPortList = Annotated[str, AfterValidator(_hostport_list)]
Port = Annotated[int, Field(ge=1, le=65535)]
Regex = Annotated[str, AfterValidator(_regex)]
PositiveSeconds = Annotated[float, Field(gt=0)]
MIN_AGING_EVERY_S = 60.0


def _aging_interval(value: float) -> float:
    if 0 < value < MIN_AGING_EVERY_S:
        raise ValueError(
            f"0 (no schedule) or at least {MIN_AGING_EVERY_S:g}s: each check reads every origin and lists "
            f"its groups, got {value:g}"
        )
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class UpstreamSaslConfig(_Section):
    """How the gateway authenticates to a cluster's brokers.

    A client that authenticated to the gateway is passed on as itself (its user and password); the
    account here is for the gateway's own connections and for clients that did not authenticate.
    """

    mechanism: SaslMechanism
    username: str
    password: str = Field(repr=False)


class ClusterConfig(_Section):
    """A Kafka cluster clients can be bound to."""

    bootstrap: HostPortList
    sasl: UpstreamSaslConfig | None = None


class ZooKeeperConfig(_Section):
    connect: Annotated[str, AfterValidator(_zk_connect)] = "127.0.0.1:2181"
    root: Annotated[str, AfterValidator(_znode_path)] = "/switchyard"
    session_timeout_s: PositiveSeconds = 10.0


class TemporalConfig(_Section):
    address: HostPort = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = "switchyard"
    ui_url: str | None = None
    """Where operators open the Web UI; the embedded stack fills it in when left empty."""


class LedgerConfig(_Section):
    url: Annotated[str, AfterValidator(_sql_url)] | None = None
    """SQLAlchemy URL; empty means a SQLite file in the stack's state directory."""


class SparkConfig(_Section):
    master: str = "local[*]"
    submit_args: list[str] = Field(default_factory=list)
    range_records: int = Field(default=50_000, ge=1)
    """The fewest source offsets one task reads from a partition: larger partitions are split into
    ranges (about three per executor core over the job), smaller ones stay whole."""


class GatewaySaslConfig(_Section):
    """SASL/PLAIN between clients and the gateway: the authenticated user name is the client's AppID."""

    mode: Literal["off", "optional", "required"] = "off"
    """``optional`` accepts clients with and without SASL; ``required`` closes unauthenticated ones."""
    users_file: Path | None = None
    """Who may connect: ``switchyard gateway add-user`` writes it; re-read when it changes."""

    @model_validator(mode="after")
    def _needs_users(self) -> GatewaySaslConfig:
        if self.mode != "off" and self.users_file is None:
            raise _KeyError("gateway.sasl.users_file", f"is needed when mode is {self.mode!r}")
        return self


MiB = 1024 * 1024
Bytes = Annotated[int, Field(ge=1024)]


class GatewayLimitsConfig(_Section):
    """What one client may cost the gateway. The defaults are a Kafka broker's where it has one."""

    frame_read_timeout_s: PositiveSeconds = 30.0
    """Once a frame has begun, the rest of it must arrive within this."""
    idle_timeout_s: PositiveSeconds = 600.0
    """A connection with no request for this long and none in flight is closed
    (the broker's ``connections.max.idle.ms``)."""
    login_timeout_s: PositiveSeconds = 10.0
    """With ``sasl.mode: required``, a connection must log in within this of connecting."""
    unauthenticated_max_frame_bytes: Bytes = 512 * 1024
    """Largest frame before a login, with ``sasl.mode: required`` (the broker's
    ``sasl.server.max.receive.size``)."""
    max_in_flight: Annotated[int, Field(ge=1)] = 64
    """Requests one connection may have waiting for their answers, besides those held; the next is read
    when one is answered."""
    max_held: Annotated[int, Field(ge=1)] = 1024
    """Requests one connection may have held while their identity is blocked, besides ``max_in_flight``;
    past it the oldest held is answered with the retriable error at once. Their bytes count against
    ``connection_buffer_bytes`` like any request's."""
    connection_buffer_bytes: Bytes = 100 * MiB
    """Request bytes one connection may hold (read and not yet answered)."""
    buffer_bytes: Bytes = 512 * MiB
    """Request bytes all connections together may hold; a reader waits for room (the broker's
    ``queued.max.request.bytes``)."""
    stale_request_grace_s: PositiveSeconds = 5.0
    """A request a newer routing epoch sends elsewhere (not a long poll) is waited for — it may still land
    on the old cluster — for its own wait (a Produce's time-out) plus this; then the broker is taken to
    have stalled: the gateway closes that connection, answers the retriable error and acknowledges the
    epoch. Keep it well under ``sagas.acks_timeout_s``. (A broker's own bound on an OffsetCommit,
    ``offsets.commit.timeout.ms``, is 5 s.)"""


class GatewayConfig(_Section):
    id: str | None = None
    """This instance's name among the gateways; defaults to the host name. Unique per live instance."""
    host: str = "127.0.0.1"
    advertised_host: str | None = None
    bootstrap_port: Port = 9192
    health_port: Port | None = None
    """Where ``GET /health`` and ``GET /ready`` answer, for a load balancer (none: not served)."""
    processes: Annotated[int, Field(ge=1, le=64)] = 1
    """How many processes serve this gateway's ports together (SO_REUSEPORT), one core's worth each;
    each registers as ``<id>.<i>`` (see workers/gateway/process/processes.py)."""
    max_frame_bytes: Bytes = 100 * MiB
    block_hold_s: PositiveSeconds = 10.0
    """How long a request of a blocked identity waits for the block to end before it is answered with
    a retriable error (a Produce at most half its own time-out, a Fetch at most its wait)."""
    usage_window_s: PositiveSeconds = 7 * 24 * 3600.0
    """How long what a client used (a topic it wrote or read, a group it worked in) counts: the gateways
    keep it this long, through their restarts, and a saga's plan counts an application seen within it
    as a user of its topics. Days, not minutes: an application idle overnight still uses them."""
    usage_publish_s: PositiveSeconds = 0.5
    """The least time between two writes of a gateway's usage report (one ZooKeeper write each): a client
    using something new is published at once, or this long after the last write. It also publishes what
    is new before it acknowledges a routing change, so a switch's group sync knows every group its keys
    used up to the block, however long this is."""
    sasl: GatewaySaslConfig = GatewaySaslConfig()
    limits: GatewayLimitsConfig = GatewayLimitsConfig()

    @model_validator(mode="after")
    def _budgets_hold_a_frame(self) -> GatewayConfig:
        if self.limits.connection_buffer_bytes < self.max_frame_bytes:
            raise _KeyError(
                "gateway.limits.connection_buffer_bytes",
                f"must be at least gateway.max_frame_bytes ({self.max_frame_bytes}), or the largest frame "
                "could never be read",
            )
        if self.limits.buffer_bytes < self.limits.connection_buffer_bytes:
            raise _KeyError(
                "gateway.limits.buffer_bytes",
                "must be at least gateway.limits.connection_buffer_bytes "
                f"({self.limits.connection_buffer_bytes})",
            )
        return self


class LinkConfig(_Section):
    """A mirror link: topics copied from ``source`` to ``target``; patterns match whole topic names."""

    source: str
    target: str
    include: list[Regex] = Field(default_factory=lambda: [".*"])
    exclude: list[Regex] = Field(default_factory=list)


ClientSettingValue = str | int | float | bool


class MirrorConfig(_Section):
    links: dict[str, LinkConfig] = Field(default_factory=dict)
    """Links created in ZooKeeper when a mirror process first starts; after that ZooKeeper holds them."""
    group_sync_interval_s: PositiveSeconds = 10.0
    status_interval_s: PositiveSeconds = 1.0
    topic_refresh_s: PositiveSeconds = 5.0
    """How often the source's topic list is read for new topics to copy."""
    settings_refresh_s: PositiveSeconds = 30.0
    """How often the copies' settings are brought in line with their source topics'. Describing every
    copied topic on both clusters costs about 0.4 s per 1,000 topics and cluster; a switch's drain
    brings them in line anyway, so a change reaches the copy within this interval or at the switch."""
    consumer: dict[str, ClientSettingValue] = Field(default_factory=dict)
    """Extra librdkafka settings for the source consumers (e.g. ``session.timeout.ms``)."""
    producer: dict[str, ClientSettingValue] = Field(default_factory=dict)
    """Extra librdkafka settings for the target producers (e.g. ``linger.ms``)."""
    principals: dict[str, dict[str, str]] = Field(default_factory=dict)
    """Principals named otherwise on some cluster, for the ACLs a link copies: per label, the principal's
    name on each cluster (``{"orders": {"primary": "User:orders", "standby": "User:orders-dr"}}``). A
    principal not listed has the same name everywhere."""

    def principal_names(self, source: str, target: str) -> dict[str, str]:
        """A principal's name on ``source`` -> its name on ``target``, where they differ."""
        return {
            names[source]: names[target]
            for names in self.principals.values()
            if source in names and target in names and names[source] != names[target]
        }


SagaKind = Literal["switchover", "switchback", "failover", "topic-migration", "partition-migration"]
Approval = Literal["none", "before-block", "before-flip"]


class SagasConfig(_Section):
    """How sagas run; fixed in each saga's history when it starts, so changing it affects new sagas only."""

    approval: dict[SagaKind, Approval] = Field(default_factory=dict)
    """Which sagas wait for a human, and where; a kind not named waits for nobody."""
    approval_timeout_s: PositiveSeconds = 3600.0
    fence_window_s: Annotated[float, Field(ge=0)] = 0.0
    """How much longer than the held steps take the fence watches the source's ends before the flip
    (0: no longer — from the drain's read to the flip's, clients held all the while)."""
    transaction_wait_s: PositiveSeconds = 10.0
    """After the block, how long a transaction open on a partition being switched may take to end before
    the switch is abandoned naming it (the mirror copies committed records only)."""
    drain_timeout_s: PositiveSeconds = 60.0
    group_sync_timeout_s: PositiveSeconds = 30.0
    """How long the keys' groups may take to come over (each idle on the target, its offsets readable)."""
    acks_timeout_s: PositiveSeconds = 15.0
    spark_verify: bool = False
    """Verify with the Spark job before the flip (clients stay blocked meanwhile)."""
    recovery_wait_s: Annotated[float, Field(ge=0)] = 0.0
    """Failover: how long to wait for the old primary to come back and measure the lost window."""
    fault_margin: Annotated[int, Field(ge=0)] = 1_000_000
    """Fault partition migration: offsets added past the highest end the gateways saw acknowledged, for
    acknowledgements not yet published (every 2 s) and writers around the gateways."""
    aging_every_s: Annotated[float, Field(ge=0), AfterValidator(_aging_interval)] = 3600.0
    """How often the workers' Temporal Schedule runs the partition migrations' aging check (0: no
    schedule; ``switchyard migrations check`` runs it by hand)."""


class ObjectivesConfig(_Section):
    """What a switch must show: drills pass or fail against these, and reports judge every saga by them."""

    rto_s: PositiveSeconds = 30.0
    """From a switch's start to every gateway routing its keys to the new cluster."""
    pause_s: PositiveSeconds = 10.0
    """How long clients were held (a drill: its canary producer's longest wait for an acknowledgement)."""
    rpo_records: Annotated[int, Field(ge=0)] = 0
    """Acknowledged records a switch may lose (a planned switch: none; a failover: the mirror's lag)."""


class DrillsConfig(_Section):
    """Scheduled DR drills (``switchyard drill``): the defaults a new drill schedule takes."""

    objectives: ObjectivesConfig = ObjectivesConfig()
    rate_per_s: Annotated[float, Field(gt=0, le=10_000)] = 200.0
    """The canary producer's records per second (it runs inside a worker, beside the sagas' steps)."""
    consumer: dict[str, Any] = Field(default_factory=dict)
    """librdkafka settings for the canary's consumer beyond its defaults (none: it runs as an application
    left at its library's defaults does)."""
    spark_verify: bool = True
    """Compare both clusters' copies of the canary topic with the Spark job after the switchback."""
    delete_topics: bool = True
    """Tidy deletes each run's canary topic from the clusters. False keeps them (to look at afterwards)."""
    catchup_window_s: PositiveSeconds = 600.0
    """A firing missed while Temporal was down still runs if it is at most this late; older ones are
    dropped (a drill hours late would meet another shift's traffic)."""


WebhookSaga = Literal["failover", "switchover"]


def _env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ValueError(f"not an environment variable name, got {value!r}")
    return value


EnvName = Annotated[str, AfterValidator(_env_name)]


class WebhookBearerConfig(_Section):
    """``Authorization: Bearer <token>``: Alertmanager's ``http_config.authorization``. The token is read
    from a file or a variable when the receiver starts, so it is never in the configuration itself."""

    token_file: Path | None = None
    token_env: EnvName | None = None


class WebhookBasicConfig(_Section):
    """HTTP basic authentication: Alertmanager's ``http_config.basic_auth``."""

    username: Annotated[str, Field(min_length=1)]
    password_file: Path | None = None
    password_env: EnvName | None = None


class WebhookAlertmanagerConfig(_Section):
    """``POST /alertmanager``: who may send. With both ``bearer`` and ``basic``, either is accepted."""

    bearer: WebhookBearerConfig | None = None
    basic: WebhookBasicConfig | None = None
    insecure: bool = False
    """Accept notifications from anyone; only where the network already decides who can connect."""


class WebhookGrafanaConfig(_Section):
    """``POST /grafana``: the contact point's HMAC-SHA256 signature of the body, hex, in a header."""

    secret_file: Path | None = None
    secret_env: EnvName | None = None
    signature_header: Annotated[str, Field(min_length=1)] = "X-Grafana-Alerting-Signature"
    timestamp_header: Annotated[str, Field(min_length=1)] | None = None
    """When set (as on the contact point), the signed text is ``<timestamp>:<body>`` and a stale
    timestamp is refused: a recorded notification cannot be replayed later."""
    max_skew_s: PositiveSeconds = 300.0
    insecure: bool = False


class WebhookPolicyConfig(_Section):
    """Alerts whose labels match start a saga on binding keys: the listed ones, or every key bound to
    ``cluster`` when the alert arrives."""

    name: Annotated[str, Field(min_length=1)]
    match: dict[str, str] = Field(default_factory=dict)
    """Labels the alert must have, with exactly these values."""
    match_re: dict[str, Regex] = Field(default_factory=dict)
    """Labels whose value must match the whole pattern (a missing label is the empty string)."""
    saga: WebhookSaga
    keys: list[str] = Field(default_factory=list)
    cluster: str | None = None
    target: str | None = None
    link: str | None = None
    approval: Approval | None = None
    """Where the saga waits for a human; empty: ``sagas.approval`` for its kind."""
    cooldown_s: Annotated[float, Field(ge=0)] = 900.0
    """After a saga on the same keys ended, alerts start no other for this long."""


class WebhookConfig(_Section):
    """``switchyard webhook``: alert notifications in, sagas out (see docs/operations.md)."""

    listen: HostPort = "127.0.0.1:9180"
    max_body_bytes: Bytes = MiB
    read_timeout_s: PositiveSeconds = 10.0
    """A request's body must have arrived within this."""
    call_timeout_s: PositiveSeconds = 10.0
    """Each call to Temporal or ZooKeeper; past it the notification is answered 503 (sent again later)."""
    dedup_window_s: PositiveSeconds = 86400.0
    """How long a notification is remembered, so its repeats and an HA pair's copies start nothing."""
    alertmanager: WebhookAlertmanagerConfig | None = None
    grafana: WebhookGrafanaConfig | None = None
    policies: list[WebhookPolicyConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> WebhookConfig:
        am = self.alertmanager
        if am is not None:
            if am.bearer is not None:
                _one_source("webhook.alertmanager.bearer", "token", am.bearer.token_file, am.bearer.token_env)
            if am.basic is not None:
                _one_source(
                    "webhook.alertmanager.basic", "password", am.basic.password_file, am.basic.password_env
                )
            _auth_or_insecure("webhook.alertmanager", am.bearer or am.basic, am.insecure, "bearer or basic")
        if self.grafana is not None:
            g = self.grafana
            if g.secret_file is not None or g.secret_env is not None:
                _one_source("webhook.grafana", "secret", g.secret_file, g.secret_env)
            _auth_or_insecure(
                "webhook.grafana", g.secret_file or g.secret_env, g.insecure, "secret_file or secret_env"
            )
        names: set[str] = set()
        for i, policy in enumerate(self.policies):
            key = f"webhook.policies.{i}"
            if policy.name in names:
                raise _KeyError(f"{key}.name", f"{policy.name!r} names an earlier policy too")
            names.add(policy.name)
            if not policy.match and not policy.match_re:
                raise _KeyError(key, "needs match or match_re: a policy matching every alert is a mistake")
            if bool(policy.keys) == (policy.cluster is not None):
                raise _KeyError(key, "needs either keys (binding keys) or cluster (every key bound to it)")
            for j, text in enumerate(policy.keys):
                try:
                    BindingKey.parse(text)
                except ValueError as exc:
                    raise _KeyError(f"{key}.keys.{j}", f"not a binding key: {exc}") from None
        return self


def _one_source(key: str, what: str, file: Path | None, env: str | None) -> None:
    if (file is None) == (env is None):
        raise _KeyError(key, f"needs exactly one of {what}_file and {what}_env")


def _auth_or_insecure(key: str, auth: object, insecure: bool, keys: str) -> None:
    if not auth and not insecure:
        raise _KeyError(
            f"{key}.insecure",
            f"no authentication configured: set {keys}, or insecure: true to take notifications from anyone",
        )
    if auth and insecure:
        raise _KeyError(f"{key}.insecure", f"true, but {keys} is set too: choose one")


class TelemetryConfig(_Section):
    otlp_endpoint: str | None = None
    """OTLP/HTTP collector, e.g. ``http://collector:4318``; empty means no exporter."""
    export_interval_s: PositiveSeconds = 15.0
    prometheus_listen: HostPort | None = None
    """Where the long-running processes (gateway, mirror, worker, webhook) serve ``/metrics`` for a
    Prometheus scrape, e.g. ``0.0.0.0:9464``; empty means no endpoint. One port per process: processes
    sharing a host need their own (``SWITCHYARD__TELEMETRY__PROMETHEUS_LISTEN``)."""


class LoggingConfig(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["text", "json"] = "text"


class StackSparkConfig(_Section):
    """A Spark standalone cluster run by the embedded stack: its master where ``spark.master`` points
    (``spark://host:port``), and ``workers`` workers on this machine."""

    workers: Annotated[int, Field(ge=0, le=16)] = 0
    """0: no cluster (jobs run wherever ``spark.master`` says, ``local[*]`` by default)."""
    worker_cores: Annotated[int, Field(ge=1)] = 1
    worker_memory: Annotated[str, Field(pattern=r"^[1-9][0-9]*[mMgG]$")] = "1g"
    ui_port: Port | None = None
    """The master's web UI; worker i's (from 1) at ``ui_port + i``. Defaults to the master's port + 1000."""


DEFAULT_KAFKA_VERSION = "4.4.0"
KafkaVersion = Annotated[str, Field(pattern=r"^(3\.9|4\.[0-9]+)\.[0-9]+$")]
"""An Apache Kafka release the stack can run: 4.x, or 3.9.x (the last with ZooKeeper, KRaft already)."""


class StackKafkaConfig(_Section):
    """Apache Kafka as the embedded stack runs it (docs/testbed.md)."""

    version: KafkaVersion = DEFAULT_KAFKA_VERSION
    """What every cluster runs unless ``stack.clusters.<id>.version`` says otherwise."""
    dist_dir: Path | None = None
    """Where each version's jars are kept once resolved from Maven Central; defaults to
    ``<state_dir>/kafka-dist``."""
    heap: Annotated[str, Field(pattern=r"^[1-9][0-9]*[mMgG]$")] = "512m"
    """Each broker's largest heap."""
    jvm_options: list[str] = Field(default_factory=list)
    """Added after the stack's own (a small G1 heap, one GC thread each kind, two compiler threads)."""


class StackClusterConfig(_Section):
    """How the stack runs one cluster: ``clusters.<id>.bootstrap`` lists its brokers' addresses."""

    version: KafkaVersion | None = None
    metadata: Literal["kraft", "zookeeper"] = "kraft"
    """Where the cluster keeps its metadata: ``kraft``, each broker a KRaft node in combined mode (broker
    and controller); ``zookeeper`` (3.9.x only, the last line with it), in the stack's ZooKeeper under
    ``/kafka-clusters/<id>/<cluster id>``, as estates that have not moved to KRaft run."""
    brokers: Annotated[int, Field(ge=1, le=5)] = 1
    """Each listening on the next address of ``clusters.<id>.bootstrap``; with 3, partitions are
    replicated three ways."""
    controllers: HostPortList | None = None
    """The brokers' KRaft controller listeners, one each; free ports are chosen (and kept) when empty."""
    properties: dict[str, str | int | float | bool] = Field(default_factory=dict)
    """Broker properties set over the stack's own (an authorizer, retention checks, ...)."""


class StackConfig(_Section):
    """The embedded stack (dev, tests, demo). Its services listen where the sections above point."""

    state_dir: Path = Path(".state")
    temporal_ui_port: Port | None = None
    """Defaults to the Temporal port + 1000, as the Temporal CLI does."""
    spark: StackSparkConfig = StackSparkConfig()
    kafka: StackKafkaConfig = StackKafkaConfig()
    clusters: dict[str, StackClusterConfig] = Field(default_factory=dict)
    """Per cluster, when it differs from one broker of ``stack.kafka.version``."""
    zookeeper_quorum_ports: list[Port] = Field(default_factory=list)
    """With several hosts in ``zookeeper.connect`` the stack runs an ensemble, a node a host: each
    node's quorum and leader-election ports, two a node, in the hosts' order."""

    def cluster(self, cluster_id: str) -> StackClusterConfig:
        return self.clusters.get(cluster_id) or StackClusterConfig()

    @property
    def kafka_dist_dir(self) -> Path:
        return self.kafka.dist_dir or self.state_dir / "kafka-dist"


class Config(_Section):
    clusters: dict[str, ClusterConfig] = Field(min_length=1)
    default_cluster: str
    zookeeper: ZooKeeperConfig = ZooKeeperConfig()
    temporal: TemporalConfig = TemporalConfig()
    ledger: LedgerConfig = LedgerConfig()
    spark: SparkConfig = SparkConfig()
    gateway: GatewayConfig = GatewayConfig()
    mirror: MirrorConfig = MirrorConfig()
    sagas: SagasConfig = SagasConfig()
    webhook: WebhookConfig = WebhookConfig()
    drills: DrillsConfig = DrillsConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    logging: LoggingConfig = LoggingConfig()
    stack: StackConfig = StackConfig()
    source: Path | None = Field(default=None, exclude=True)
    """The file this configuration was read from (set by :func:`load_config`)."""

    @model_validator(mode="after")
    def _references(self) -> Config:
        if self.default_cluster not in self.clusters:
            raise _KeyError("default_cluster", f"{self.default_cluster!r} is not one of clusters")
        for link_id, link in self.mirror.links.items():
            for end in ("source", "target"):
                name = getattr(link, end)
                if name not in self.clusters:
                    raise _KeyError(f"mirror.links.{link_id}.{end}", f"{name!r} is not one of clusters")
            if link.source == link.target:
                raise _KeyError(f"mirror.links.{link_id}", "source and target are the same cluster")
        if self.stack.spark.workers and self.spark_master_address is None:
            raise _KeyError(
                "stack.spark.workers",
                f"the stack can only run a cluster where spark.master points: spark://host:port, not "
                f"{self.spark.master!r}",
            )
        return self

    @model_validator(mode="after")
    def _stack_clusters(self) -> Config:
        for cluster_id, wanted in self.stack.clusters.items():
            key = f"stack.clusters.{cluster_id}"
            if cluster_id not in self.clusters:
                raise _KeyError(key, f"{cluster_id!r} is not one of clusters")
            listed = len(self.clusters[cluster_id].bootstrap.split(","))
            if wanted.brokers > 1 and listed != wanted.brokers:
                raise _KeyError(
                    f"{key}.brokers",
                    f"{wanted.brokers} brokers need {wanted.brokers} addresses in "
                    f"clusters.{cluster_id}.bootstrap, one each; it lists {listed}",
                )
            if wanted.metadata == "zookeeper":
                version = wanted.version or self.stack.kafka.version
                if not version.startswith("3."):
                    raise _KeyError(
                        f"{key}.metadata",
                        f"Apache Kafka {version} has no ZooKeeper mode (4.0 removed it); run the cluster "
                        "on 3.9.x (stack.clusters.<id>.version) or in KRaft mode",
                    )
                if wanted.controllers:
                    raise _KeyError(
                        f"{key}.controllers", "a cluster in ZooKeeper mode has no KRaft controllers"
                    )
            if wanted.controllers and len(wanted.controllers.split(",")) != wanted.brokers:
                raise _KeyError(
                    f"{key}.controllers", f"needs one address for each of its {wanted.brokers} brokers"
                )
        return self

    @model_validator(mode="after")
    def _principals(self) -> Config:
        for label, names in self.mirror.principals.items():
            for cluster, principal in names.items():
                key = f"mirror.principals.{label}.{cluster}"
                if cluster not in self.clusters:
                    raise _KeyError(key, f"{cluster!r} is not one of clusters")
                if ":" not in principal:
                    raise _KeyError(key, f"{principal!r} is not a principal (type:name, as User:orders)")
        return self

    @property
    def spark_master_address(self) -> tuple[str, int] | None:
        """``spark.master``'s host and port if it names a standalone master (``spark://host:port``)."""
        scheme, _, rest = self.spark.master.partition("://")
        if scheme != "spark" or "," in rest:
            return None
        try:
            return split_hostport(rest)
        except ValueError:
            return None

    @property
    def ledger_url(self) -> str:
        return self.ledger.url or f"sqlite:///{self.stack.state_dir / 'ledger.db'}"

    @property
    def temporal_ui_port(self) -> int:
        return self.stack.temporal_ui_port or split_hostport(self.temporal.address)[1] + 1000

    @property
    def temporal_ui_url(self) -> str:
        host = split_hostport(self.temporal.address)[0]
        return self.temporal.ui_url or f"http://{host}:{self.temporal_ui_port}"


class _KeyError(ValueError):
    """A cross-field problem that belongs to one key, so the message can name it."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(problem)
        self.key = key
        self.problem = problem


def config_path(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Where the configuration is read from: the argument, then the environment, then the cwd."""
    return Path(explicit or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_NAME)


def load_config(
    path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> Config:
    """Read, override from the environment, validate; raise ConfigError naming every bad key."""
    file = config_path(path)
    env = os.environ if environ is None else environ
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        hint = f" (set --config or ${CONFIG_ENV})" if path is None else ""
        raise ConfigError(f"{file}: cannot read configuration: {exc.strerror}{hint}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: the top level must be a mapping of sections, got {type(data).__name__}")
    origins = _apply_overrides(data, env, file)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(file, exc, origins)) from None
    base = file.resolve().parent
    users_file = config.gateway.sasl.users_file
    sasl = config.gateway.sasl.model_copy(update={"users_file": users_file and (base / users_file).resolve()})
    dist_dir = config.stack.kafka.dist_dir
    return config.model_copy(
        update={
            "source": file.resolve(),
            "stack": config.stack.model_copy(
                update={
                    "state_dir": (base / config.stack.state_dir).resolve(),
                    "kafka": config.stack.kafka.model_copy(
                        update={"dist_dir": dist_dir and (base / dist_dir).resolve()}
                    ),
                }
            ),
            "gateway": config.gateway.model_copy(update={"sasl": sasl}),
        }
    )


def _apply_overrides(data: dict[str, Any], env: Mapping[str, str], file: Path) -> dict[str, str]:
    """Apply ``SWITCHYARD__A__B=value`` variables; return which key came from which variable."""
    origins: dict[str, str] = {}
    for name in sorted(env):
        if not name.startswith(OVERRIDE_PREFIX):
            continue
        parts = [p.lower() for p in name[len(OVERRIDE_PREFIX) :].split("__")]
        if not all(parts):
            raise ConfigError(f"{name}: malformed override name (use SWITCHYARD__SECTION__KEY)")
        try:
            value = yaml.safe_load(env[name])
        except yaml.YAMLError as exc:
            raise ConfigError(f"{name}: value is not valid YAML: {exc}") from exc
        node = data
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                key = ".".join(parts[: i + 1])
                raise ConfigError(f"{file}: {key}: is not a section, so {name} cannot set a key inside it")
            node = child
        node[parts[-1]] = value
        origins[".".join(parts)] = name
    return origins


def _describe(file: Path, exc: ValidationError, origins: Mapping[str, str]) -> str:
    lines = [f"{file}: invalid configuration:"]
    for err in exc.errors():
        ctx_error = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_error, _KeyError):
            key, problem = ctx_error.key, ctx_error.problem
        else:
            key = ".".join(str(p) for p in err["loc"]) or "(top level)"
            problem = _problem(err)
        origin = next((v for k, v in origins.items() if key == k or key.startswith(k + ".")), None)
        lines.append(f"  {key}: {problem}" + (f" (from ${origin})" if origin else ""))
    return "\n".join(lines)


def _problem(err: Mapping[str, Any]) -> str:
    kind = err["type"]
    if kind == "missing":
        return "required key is missing"
    if kind == "extra_forbidden":
        return "unknown key"
    message = str(err["msg"]).removeprefix("Value error, ")
    if kind == "value_error":
        return message
    return f"{message} (got {err.get('input')!r})"
