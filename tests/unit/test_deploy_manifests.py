"""The Kubernetes deployment under ``infra/deploy/``, checked offline against Kubernetes and the code.

Every manifest, and every ConfigMap and Secret kustomize generates, is validated against the Kubernetes
API schemas that ``kubernetes-validate`` bundles (no cluster, no network: the tests run with sockets
refused). Then the references are followed, since a schema cannot see them: the ConfigMaps, Secrets,
Services and images a workload names exist, probes name ports the container has, Services reach ports
their pods have, and every workload with several replicas has a disruption budget. And the deployment is
held to the code: each container runs a real ``switchyard`` process command (parsed by the CLI itself),
and the configuration loads through :func:`switchyard.config.load_config` with each container's own
environment, its ports, probes, mounts and grace period matching what that configuration and the
process's code say. So neither the manifests nor the configuration schema can drift unnoticed.

Each check is a function that returns what is wrong; ``test_each_check_can_fail`` breaks a copy of the
deployment once per kind of mistake and sees the check report it.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import socket
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from switchyard.alerts.auth import authenticators
from switchyard.cli import cli
from switchyard.config import Config, load_config, split_hostport
from switchyard.errors import ConfigError
from workers.gateway.process.server import Gateway
from workers.mirror.copier import LinkCopier
from workers.webhook.main import GRACE_S as WEBHOOK_GRACE_S
from workers.worker.main import GRACE as WORKER_GRACE

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "infra" / "deploy"
KUBERNETES_VERSION = "1.30"
"""The release validated against. What the manifests use (apps/v1, policy/v1 budgets, startup probes) is
older, so newer clusters take them as they are."""
WORKLOAD_KINDS = {"Deployment", "StatefulSet"}
PROCESS_COMMANDS = {ep.name for ep in entry_points(group="switchyard.commands")}
"""The long-running processes (gateway, mirror, webhook, worker): pyproject's ``switchyard.commands``."""
SHUTDOWN_S: dict[str, float] = {
    "gateway": float(inspect.signature(Gateway.stop).parameters["grace_s"].default),
    "mirror": float(inspect.signature(LinkCopier.stop).parameters["timeout_s"].default),
    "worker": WORKER_GRACE.total_seconds(),
    "webhook": float(WEBHOOK_GRACE_S),
}
"""How long each process may take to stop after SIGTERM, from its code: its grace period must cover it."""
LEDGER_USERS = {"mirror", "worker"}
"""The processes that open the ledger (``Ledger.open``); they must all be given the same URL."""
POD_FIELDS = {"metadata.name": "{workload}-0", "metadata.namespace": "switchyard", "status.podIP": "10.0.0.7"}
"""Stand-ins for the downward API's values."""
SERVED_ANYWHERE = {"0.0.0.0", "::"}
PORT_NAME = re.compile(r"^(?=.*[a-z])(?!.*--)[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$")
"""Kubernetes' IANA_SVC_NAME: at most 15 characters, a letter among them, no leading, trailing or double
'-'. The schemas do not check it; the API server does."""
DNS_LABEL = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
QUANTITY = re.compile(r"^([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
UNITS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}

Obj = dict[str, Any]


@dataclass
class Deploy:
    """infra/deploy/ as kustomize would see it: the listed manifests, and what its generators make."""

    root: Path
    kustomization: Obj
    manifests: list[Obj]
    config_maps: dict[str, dict[str, str]]
    """ConfigMaps, written or generated: name -> key -> content."""
    secrets: dict[str, dict[str, str]]
    """Secrets: name -> key -> content; a generated one's from the committed ``.example`` of each file."""
    entrypoint: list[str]
    """The image's ENTRYPOINT (infra/deploy/Dockerfile): what a container without ``command`` runs."""


@dataclass
class Process:
    """One container of one workload, with what Kubernetes would hand it."""

    workload: Obj
    container: Obj
    env: dict[str, str]
    args: list[str]
    """What follows ``switchyard`` on its command line, ``$(VAR)`` expanded."""

    @property
    def name(self) -> str:
        return f"{self.workload['kind']}/{self.workload['metadata']['name']}"

    @property
    def pod(self) -> Obj:
        pod: Obj = self.workload["spec"]["template"]["spec"]
        return pod

    @property
    def command(self) -> str | None:
        """The sub-command: the first argument that is neither an option of the root nor its value."""
        rest = self.args
        while rest and rest[0].startswith("-"):
            rest = rest[2:] if rest[0] == "--config" else rest[1:]
        return rest[0] if rest else None

    def option(self, name: str) -> str | None:
        return next((b for a, b in zip(self.args, self.args[1:], strict=False) if a == name), None)

    def ports(self) -> dict[str, int]:
        return {p["name"]: p["containerPort"] for p in self.container.get("ports", []) if "name" in p}


# ---- loading


def load(root: Path) -> Deploy:
    kustomization = yaml.safe_load((root / "kustomization.yaml").read_text(encoding="utf-8"))
    manifests = [
        doc
        for name in kustomization["resources"]
        for doc in yaml.safe_load_all((root / name).read_text(encoding="utf-8"))
        if doc
    ]
    written = {
        kind: {
            m["metadata"]["name"]: {**m.get("data", {}), **m.get("stringData", {})}
            for m in manifests
            if m["kind"] == kind
        }
        for kind in ("ConfigMap", "Secret")
    }
    return Deploy(
        root=root,
        kustomization=kustomization,
        manifests=manifests,
        config_maps={
            **written["ConfigMap"],
            **{g["name"]: generated(root, g) for g in kustomization.get("configMapGenerator", [])},
        },
        secrets={
            **written["Secret"],
            **{g["name"]: generated(root, g, example=True) for g in kustomization.get("secretGenerator", [])},
        },
        entrypoint=entrypoint(root / "Dockerfile"),
    )


def generated(root: Path, generator: Obj, *, example: bool = False) -> dict[str, str]:
    """A generator's keys and contents; with ``example``, from the ``.example`` beside each file it names
    (the secret files themselves are not committed)."""
    data = {}
    for entry in generator.get("files", []):
        key, _, path = entry.rpartition("=")
        source = root / path
        text = source.with_name(source.name + ".example") if example else source
        data[key or source.name] = text.read_text(encoding="utf-8")
    for entry in generator.get("literals", []):
        key, _, value = entry.partition("=")
        data[key] = value
    return data


def entrypoint(dockerfile: Path) -> list[str]:
    lines = [ln for ln in dockerfile.read_text(encoding="utf-8").splitlines() if ln.startswith("ENTRYPOINT ")]
    assert len(lines) == 1, f"{dockerfile}: one exec-form ENTRYPOINT expected"
    found: list[str] = json.loads(lines[0].removeprefix("ENTRYPOINT "))
    return found


def of_kind(deploy: Deploy, *kinds: str) -> list[Obj]:
    return [m for m in deploy.manifests if m.get("kind") in kinds]


def find(deploy: Deploy, kind: str, name: str) -> Obj:
    return next(m for m in of_kind(deploy, kind) if m["metadata"]["name"] == name)


def label(obj: Obj) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion in env values, command and args; unknown names stay as written."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), text)


def environment(deploy: Deploy, workload: Obj, container: Obj) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        ref = entry.get("valueFrom", {})
        if "value" in entry:
            env[entry["name"]] = expand(entry["value"], env)
        elif "fieldRef" in ref:
            env[entry["name"]] = POD_FIELDS[ref["fieldRef"]["fieldPath"]].format(
                workload=workload["metadata"]["name"]
            )
        elif "secretKeyRef" in ref or "configMapKeyRef" in ref:
            kind = "secretKeyRef" if "secretKeyRef" in ref else "configMapKeyRef"
            source = deploy.secrets if kind == "secretKeyRef" else deploy.config_maps
            value = source.get(ref[kind]["name"], {}).get(ref[kind]["key"])
            if value is not None:  # a missing one is reference_problems' to report
                env[entry["name"]] = value
    return env


def processes(deploy: Deploy) -> Iterator[Process]:
    for workload in of_kind(deploy, *WORKLOAD_KINDS):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            env = environment(deploy, workload, container)
            line = [
                expand(a, env)
                for a in [*(container.get("command") or deploy.entrypoint), *container.get("args", [])]
            ]
            args = line[line.index("switchyard") + 1 :] if "switchyard" in line else []
            yield Process(workload, container, env, args)


def quantity(text: str | int) -> float:
    match = QUANTITY.match(str(text))
    assert match, f"not a quantity I can read: {text!r}"
    return float(match[1]) * UNITS[match[2]]


def mounted(process: Process, path: str) -> tuple[Obj, str] | None:
    """The volume a file path in the container lies on, and the path inside it."""
    volumes = {v["name"]: v for v in process.pod.get("volumes", [])}
    for mount in process.container.get("volumeMounts", []):
        base = PurePosixPath(mount["mountPath"])
        if base in PurePosixPath(path).parents and mount["name"] in volumes:
            return volumes[mount["name"]], str(PurePosixPath(path).relative_to(base))
    return None


# ---- the checks


def listing_problems(deploy: Deploy) -> list[str]:
    """Every YAML file is validated: listed as a resource, or a generator's source."""
    sources = {
        entry.rpartition("=")[2]
        for generator in [
            *deploy.kustomization.get("configMapGenerator", []),
            *deploy.kustomization.get("secretGenerator", []),
        ]
        for entry in generator.get("files", [])
    }
    listed = {*deploy.kustomization["resources"], *sources, "kustomization.yaml"}
    present = {
        str(p.relative_to(deploy.root)) for p in deploy.root.rglob("*") if p.suffix in (".yaml", ".yml")
    }
    return [
        f"{name}: neither a resource in kustomization.yaml nor a generator's source"
        for name in sorted(present - listed)
    ]


def generated_objects(deploy: Deploy) -> list[Obj]:
    """What the generators make (a written ConfigMap or Secret is among the manifests already)."""
    meta = {"namespace": deploy.kustomization.get("namespace", "default")}
    return [
        *(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, **meta}, "data": d}
            for n, d in deploy.config_maps.items()
            if n in generated_names(deploy, "configMapGenerator")
        ),
        *(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": n, **meta}, "stringData": d}
            for n, d in deploy.secrets.items()
            if n in generated_names(deploy, "secretGenerator")
        ),
    ]


def generated_names(deploy: Deploy, generator: str) -> set[str]:
    return {g["name"] for g in deploy.kustomization.get(generator, [])}


def schema_problems(deploy: Deploy) -> list[str]:
    problems = []
    for obj in [*deploy.manifests, *generated_objects(deploy)]:
        try:
            used = kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.absolute_path) or "(top)"
            problems.append(f"{label(obj)}: {where}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            problems.append(f"{label(obj)}: {exc.message}")
        else:
            if used != KUBERNETES_VERSION:
                problems.append(
                    f"{label(obj)}: validated against Kubernetes {used}, not {KUBERNETES_VERSION}"
                )
    return problems


def name_problems(deploy: Deploy) -> list[str]:
    """What the API server checks and the schemas do not: the form of names."""
    problems = [
        f"{label(obj)}: not a DNS label"
        for obj in deploy.manifests
        if not DNS_LABEL.match(obj["metadata"]["name"])
    ]
    named = [(label(s), p["name"]) for s in of_kind(deploy, "Service") for p in s["spec"]["ports"]] + [
        (process.name, p["name"]) for process in processes(deploy) for p in process.container.get("ports", [])
    ]
    return problems + [
        f"{where}: port name {name!r} is not a valid port name"
        for where, name in named
        if not PORT_NAME.match(name)
    ]


def reference_problems(deploy: Deploy) -> list[str]:
    """What a workload, Service or budget names exists."""
    problems = []
    sources = {"ConfigMap": deploy.config_maps, "Secret": deploy.secrets}
    images = {image["name"] for image in deploy.kustomization.get("images", [])}

    def need(kind: str, name: str, keys: list[str], where: str) -> None:
        if name not in sources[kind]:
            problems.append(f"{where}: {kind} {name!r} is not defined")
        problems.extend(
            f"{where}: {kind} {name!r} has no key {k!r}" for k in keys if k not in sources[kind].get(name, {})
        )

    for process in processes(deploy):
        volumes = {v["name"]: v for v in process.pod.get("volumes", [])}
        for volume in volumes.values():
            for kind, field, name_key in (
                ("ConfigMap", "configMap", "name"),
                ("Secret", "secret", "secretName"),
            ):
                if field in volume:
                    keys = [item["key"] for item in volume[field].get("items", [])]
                    need(kind, volume[field][name_key], keys, process.name)
        for entry in process.container.get("env", []):
            for kind, field in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                if field in entry.get("valueFrom", {}):
                    ref = entry["valueFrom"][field]
                    need(kind, ref["name"], [ref["key"]], f"{process.name} env {entry['name']}")
        problems.extend(
            f"{process.name}: mounts volume {m['name']!r}, which the pod does not have"
            for m in process.container.get("volumeMounts", [])
            if m["name"] not in volumes
        )
        if process.container["image"] not in images:
            problems.append(
                f"{process.name}: image {process.container['image']!r} is not in kustomization.yaml's images"
            )
    return problems + service_problems(deploy)


def selects(selector: dict[str, str], workload: Obj) -> bool:
    labels = workload["spec"]["template"]["metadata"].get("labels", {})
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def service_problems(deploy: Deploy) -> list[str]:
    problems = []
    workloads = of_kind(deploy, *WORKLOAD_KINDS)
    services = {s["metadata"]["name"]: s for s in of_kind(deploy, "Service")}
    for service in services.values():
        backing = [w for w in workloads if selects(service["spec"].get("selector", {}), w)]
        if not backing:
            problems.append(f"{label(service)}: its selector matches no workload's pods")
        ports = [
            p
            for w in backing
            for c in w["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", [])
        ]
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            if not any(p.get("name") == target or p["containerPort"] == target for p in ports):
                problems.append(
                    f"{label(service)}: port {port['name']} targets {target!r}, which its pods do not have"
                )
    for statefulset in of_kind(deploy, "StatefulSet"):
        governing = services.get(statefulset["spec"]["serviceName"])
        if (
            governing is None
            or governing["spec"].get("clusterIP") != "None"
            or not selects(governing["spec"]["selector"], statefulset)
        ):
            problems.append(
                f"{label(statefulset)}: serviceName must name a headless Service selecting its pods"
            )
    for budget in of_kind(deploy, "PodDisruptionBudget"):
        if not any(selects(budget["spec"]["selector"].get("matchLabels", {}), w) for w in workloads):
            problems.append(f"{label(budget)}: its selector matches no workload's pods")
    return problems


def budget_problems(deploy: Deploy) -> list[str]:
    """A workload of several replicas is drained one pod at a time, not all at once."""
    budgets = [b["spec"]["selector"].get("matchLabels", {}) for b in of_kind(deploy, "PodDisruptionBudget")]
    return [
        f"{label(w)}: {w['spec'].get('replicas', 1)} replicas and no PodDisruptionBudget"
        for w in of_kind(deploy, *WORKLOAD_KINDS)
        if w["spec"].get("replicas", 1) > 1 and not any(selects(b, w) for b in budgets)
    ]


def probe_problems(deploy: Deploy) -> list[str]:
    problems = []
    for process in processes(deploy):
        ports = process.ports()
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            for handler in ("httpGet", "tcpSocket", "grpc"):
                port = process.container.get(kind, {}).get(handler, {}).get("port")
                if port is not None and port not in ports and port not in ports.values():
                    problems.append(
                        f"{process.name}: {kind} uses port {port!r}, which the container does not have"
                    )
    return problems


def resource_problems(deploy: Deploy) -> list[str]:
    """Every container asks for what it needs and is bounded in memory (sizing: docs/deployment.md)."""
    wanted = (("requests", "cpu"), ("requests", "memory"), ("limits", "memory"))
    return [
        f"{process.name}: no resources.{part}.{what}"
        for process in processes(deploy)
        for part, what in wanted
        if what not in process.container.get("resources", {}).get(part, {})
    ]


def command_problems(deploy: Deploy) -> list[str]:
    """Each container runs a process command of ``switchyard``, with options the command takes."""
    problems = []
    for process in processes(deploy):
        if process.command not in PROCESS_COMMANDS:
            runs = process.args or "no switchyard command"
            problems.append(f"{process.name}: runs {runs}, not one of {sorted(PROCESS_COMMANDS)}")
            continue
        result = CliRunner().invoke(cli, [*process.args, "--help"], prog_name="switchyard")
        if result.exit_code != 0 or f"Usage: switchyard {process.command}" not in result.output:
            line = " ".join(process.args)
            problems.append(f"{process.name}: `switchyard {line}` does not parse: {result.output.strip()}")
    return problems


def config_problems(deploy: Deploy) -> list[str]:
    """The configuration each process is given loads, and agrees with its pod."""
    problems, ledgers = [], set()
    for process in processes(deploy):
        given = config_file(deploy, process)
        if given is None:
            problems.append(
                f"{process.name}: --config {process.option('--config')} is not in a mounted ConfigMap"
            )
            continue
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / given[0]
            path.write_text(given[1], encoding="utf-8")
            try:
                config = load_config(path, environ=process.env)
            except ConfigError as exc:
                problems.append(f"{process.name}: {exc}")
                continue
        said = pod_problems(process, config)
        if process.command in PROCESS_CHECKS:
            said += PROCESS_CHECKS[process.command](deploy, process, config)
        problems += [f"{process.name}: {p}" for p in said]
        if process.command in LEDGER_USERS:
            ledgers.add(config.ledger.url)
    if len(ledgers) > 1 or None in ledgers:
        problems.append(
            f"the processes that open the ledger must be given one URL, not {sorted(map(str, ledgers))}"
        )
    return problems


def config_file(deploy: Deploy, process: Process) -> tuple[str, str] | None:
    """The name and content of the file ``--config`` names, if a mounted ConfigMap holds it."""
    path = process.option("--config")
    found = mounted(process, path) if path else None
    if found is None or "configMap" not in found[0]:
        return None
    text = deploy.config_maps.get(found[0]["configMap"]["name"], {}).get(found[1])
    return None if text is None else (found[1], text)


def pod_problems(process: Process, config: Config) -> list[str]:
    """What every process's pod must match: its metrics port, and a grace period its shutdown fits in."""
    problems = []
    listen = config.telemetry.prometheus_listen
    if listen is None:
        problems.append("telemetry.prometheus_listen is not set: nothing to scrape")
    else:
        host, port = split_hostport(listen)
        annotated = (
            process.workload["spec"]["template"]["metadata"].get("annotations", {}).get("prometheus.io/port")
        )
        if host not in SERVED_ANYWHERE:
            problems.append(f"telemetry.prometheus_listen {listen}: not reachable on the pod's IP")
        if process.ports().get("metrics") != port or annotated != str(port):
            problems.append(
                f"telemetry.prometheus_listen port {port}: so must port 'metrics' and prometheus.io/port"
            )
    pre_stop = process.container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    pausing = float(pre_stop[1]) if pre_stop[:1] == ["sleep"] else 0.0
    grace = process.pod.get("terminationGracePeriodSeconds", 30)
    needed = SHUTDOWN_S.get(process.command or "", 0.0) + pausing
    if grace < needed:
        problems.append(
            f"terminationGracePeriodSeconds {grace} < {needed:g}: the preStop pause and the shutdown"
        )
    return problems


def gateway_problems(deploy: Deploy, process: Process, config: Config) -> list[str]:
    gateway, ports, problems = config.gateway, process.ports(), []
    if gateway.host not in SERVED_ANYWHERE:
        problems.append(f"gateway.host {gateway.host}: clients and probes reach the pod on its IP")
    if ports.get("bootstrap") != gateway.bootstrap_port:
        problems.append(f"container port 'bootstrap' must be gateway.bootstrap_port {gateway.bootstrap_port}")
    virtual = sorted(int(name.removeprefix("vb-")) for name in ports if re.fullmatch(r"vb-\d+", name))
    if not virtual or virtual != list(range(1, len(virtual) + 1)):
        problems.append(f"virtual broker ports must be vb-1..vb-N (slots start at 1), got {virtual}")
    problems += [
        f"port vb-{v} is {ports[f'vb-{v}']}, but the virtual broker in slot {v} listens on "
        f"{gateway.bootstrap_port + v}"
        for v in virtual
        if ports[f"vb-{v}"] != gateway.bootstrap_port + v
    ]
    for kind, path in (("livenessProbe", "/health"), ("readinessProbe", "/ready")):
        probe = process.container.get(kind, {}).get("httpGet", {})
        if probe.get("path") != path or ports.get(probe.get("port")) != gateway.health_port:
            problems.append(f"{kind} must GET {path} on gateway.health_port ({gateway.health_port})")
    pod = POD_FIELDS["metadata.name"].format(workload=process.workload["metadata"]["name"])
    if process.option("--id") != pod:
        problems.append(f"--id is {process.option('--id')!r}: each replica's id must be its own pod name")
    service = process.workload["spec"].get("serviceName")
    if not (gateway.advertised_host or "").startswith(f"{pod}.{service}."):
        problems.append(
            f"gateway.advertised_host {gateway.advertised_host!r}: not the pod's own name in {service}"
        )
    limit = process.container.get("resources", {}).get("limits", {}).get("memory")
    if limit is None or quantity(limit) <= gateway.limits.buffer_bytes:
        bound = gateway.limits.buffer_bytes
        problems.append(f"memory limit {limit} leaves no room above gateway.limits.buffer_bytes {bound}")
    users = gateway.sasl.users_file
    if gateway.sasl.mode != "off" and users is not None:
        found = mounted(process, str(users))
        secret = found[0].get("secret", {}).get("secretName") if found else None
        if found is None or found[1] not in deploy.secrets.get(secret or "", {}):
            problems.append(f"gateway.sasl.users_file {users}: not a key of a mounted Secret")
    return problems


def webhook_problems(deploy: Deploy, process: Process, config: Config) -> list[str]:
    host, port = split_hostport(config.webhook.listen)
    problems = (
        []
        if host in SERVED_ANYWHERE
        else [f"webhook.listen {config.webhook.listen}: not reachable on the pod's IP"]
    )
    if process.ports().get("http") != port:
        problems.append(f"container port 'http' must be webhook.listen's port {port}")
    for kind in ("livenessProbe", "readinessProbe"):
        probe = process.container.get(kind, {}).get("httpGet", {})
        if probe.get("path") != "/healthz" or process.ports().get(probe.get("port")) != port:
            problems.append(f"{kind} must GET /healthz on webhook.listen's port {port}")
    try:
        authenticators(config, environ=process.env)  # as `switchyard webhook` does at start
    except ConfigError as exc:
        problems.append(str(exc))
    return problems


def worker_problems(deploy: Deploy, process: Process, config: Config) -> list[str]:
    """The drills' canary bootstraps to ``gateway.advertised_host:bootstrap_port`` (activities/drills.py)."""
    host, port = config.gateway.advertised_host or config.gateway.host, config.gateway.bootstrap_port
    service = next(
        (s for s in of_kind(deploy, "Service") if s["metadata"]["name"] == host.split(".")[0]), None
    )
    if service is None or port not in [p["port"] for p in service["spec"]["ports"]]:
        return [f"the drills' canary bootstraps to {host}:{port}, which no Service here answers"]
    return []


PROCESS_CHECKS: dict[str, Callable[[Deploy, Process, Config], list[str]]] = {
    "gateway": gateway_problems,
    "webhook": webhook_problems,
    "worker": worker_problems,
}
CHECKS: dict[str, Callable[[Deploy], list[str]]] = {
    "listing": listing_problems,
    "schema": schema_problems,
    "names": name_problems,
    "references": reference_problems,
    "budgets": budget_problems,
    "probes": probe_problems,
    "resources": resource_problems,
    "commands": command_problems,
    "config": config_problems,
}


# ---- the tests


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No check may reach the network: the schemas must come from the installed package."""

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise OSError("the deployment checks must run offline")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture(scope="module")
def deploy() -> Deploy:
    return load(DEPLOY)


def test_the_deployment_has_every_process(deploy: Deploy) -> None:
    assert {p.command for p in processes(deploy)} == PROCESS_COMMANDS


@pytest.mark.parametrize("check", CHECKS)
def test_the_deployment_passes(deploy: Deploy, check: str) -> None:
    assert CHECKS[check](deploy) == []


@dataclass(frozen=True)
class Break:
    """One mistake, made on a copy of the deployment, and what the check must say about it."""

    check: str
    what: str
    change: Callable[[Deploy], None]
    says: str


def edit(kind: str, name: str, change: Callable[[Obj], None]) -> Callable[[Deploy], None]:
    return lambda deploy: change(find(deploy, kind, name))


def edit_container(kind: str, name: str, change: Callable[[Obj], None]) -> Callable[[Deploy], None]:
    return lambda deploy: change(find(deploy, kind, name)["spec"]["template"]["spec"]["containers"][0])


def set_env(name: str, value: str) -> Callable[[Obj], None]:
    def change(container: Obj) -> None:
        container["env"] = [e for e in container.get("env", []) if e["name"] != name]
        container["env"].append({"name": name, "value": value})

    return change


def set_port(name: str, number: int | str) -> Callable[[Obj], None]:
    def change(container: Obj) -> None:
        next(p for p in container["ports"] if p["name"] == name)["containerPort"] = number

    return change


def set_arg(index: int, value: str) -> Callable[[Obj], None]:
    return lambda container: container["args"].__setitem__(index, value)


GATEWAY, MIRROR, WORKER, WEBHOOK = (f"switchyard-{p}" for p in ("gateway", "mirror", "worker", "webhook"))
STS, DEP, SVC, PDB = "StatefulSet", "Deployment", "Service", "PodDisruptionBudget"
COMPONENT = "app.kubernetes.io/component"
# fmt: off
BREAKS = [
    Break("listing", "a manifest left out", lambda d: d.kustomization["resources"].remove("webhook.yaml"),
          "webhook.yaml: neither a resource"),
    Break("schema", "a misspelt field", edit(STS, GATEWAY, lambda o: o["spec"].update(replica=3)),
          "'replica' was unexpected"),
    Break("schema", "a port number as text", edit_container(DEP, MIRROR, set_port("metrics", "9464")),
          "is not of type 'integer'"),
    Break("names", "a port name too long",
          edit_container(DEP, WEBHOOK, lambda c: c["ports"][0].update(name="alertmanager-http")),
          "'alertmanager-http' is not a valid port name"),
    Break("references", "an unknown ConfigMap",
          edit(DEP, WORKER, lambda o: o["spec"]["template"]["spec"]["volumes"][0]["configMap"].update(
              name="x")),
          "ConfigMap 'x' is not defined"),
    Break("references", "an unknown Secret key",
          edit_container(DEP, MIRROR, lambda c: c["env"][1]["valueFrom"]["secretKeyRef"].update(key="uri")),
          "Secret 'switchyard-ledger' has no key 'uri'"),
    Break("references", "a mount of no volume",
          edit_container(DEP, WEBHOOK, lambda c: c["volumeMounts"][0].update(name="cfg")),
          "mounts volume 'cfg', which the pod does not have"),
    Break("references", "an image kustomize does not set",
          edit_container(DEP, WORKER, lambda c: c.update(image="switchyard:dev")),
          "image 'switchyard:dev' is not in kustomization.yaml's images"),
    Break("references", "a Service port to nowhere",
          edit(SVC, WEBHOOK, lambda o: o["spec"]["ports"][0].update(targetPort="web")),
          "targets 'web', which its pods do not have"),
    Break("references", "a Service selecting nothing",
          edit(SVC, f"{GATEWAY}-bootstrap", lambda o: o["spec"]["selector"].update({COMPONENT: "gw"})),
          "its selector matches no workload's pods"),
    Break("references", "a StatefulSet governed by a Service that is not headless",
          edit(STS, GATEWAY, lambda o: o["spec"].update(serviceName=f"{GATEWAY}-bootstrap")),
          "serviceName must name a headless Service"),
    Break("references", "a budget selecting nothing",
          edit(PDB, MIRROR, lambda o: o["spec"]["selector"]["matchLabels"].update({COMPONENT: "mirrors"})),
          "PodDisruptionBudget/switchyard-mirror: its selector matches no workload's pods"),
    Break("budgets", "replicas without a budget", lambda d: d.manifests.remove(find(d, PDB, MIRROR)),
          "2 replicas and no PodDisruptionBudget"),
    Break("probes", "a probe on a port not declared",
          edit_container(STS, GATEWAY, lambda c: c["readinessProbe"]["httpGet"].update(port="ready")),
          "readinessProbe uses port 'ready'"),
    Break("resources", "no memory limit", edit_container(DEP, MIRROR, lambda c: c["resources"].pop("limits")),
          "no resources.limits.memory"),
    Break("commands", "a command switchyard does not have",
          edit_container(DEP, MIRROR, set_arg(2, "mirrors")),
          "not one of ['gateway', 'mirror', 'webhook', 'worker']"),
    Break("commands", "an option the command does not take",
          edit_container(STS, GATEWAY, set_arg(3, "--name")),
          "No such option '--name'"),
    Break("commands", "a CLI command, not a process",
          edit_container(DEP, WORKER, lambda c: c.update(args=["status"])), "runs ['status']"),
    Break("config", "a value out of range",
          edit_container(STS, GATEWAY, set_env("SWITCHYARD__GATEWAY__BOOTSTRAP_PORT", "70000")),
          "gateway.bootstrap_port: Input should be less than or equal to 65535"),
    Break("config", "an unknown key", edit_container(DEP, MIRROR, set_env("SWITCHYARD__MIRROR__LINK", "{}")),
          "mirror.link: unknown key"),
    Break("config", "--config not mounted", edit_container(DEP, WEBHOOK, set_arg(1, "/etc/switchyard.yaml")),
          "--config /etc/switchyard.yaml is not in a mounted ConfigMap"),
    Break("config", "a virtual broker's port off by one",
          edit_container(STS, GATEWAY, set_port("vb-2", 9193)),
          "the virtual broker in slot 2 listens on 9194"),
    Break("config", "the health port elsewhere", edit_container(STS, GATEWAY, set_port("health", 8081)),
          "readinessProbe must GET /ready on gateway.health_port"),
    Break("config", "one advertised host for every replica",
          edit_container(STS, GATEWAY, set_env("SWITCHYARD__GATEWAY__ADVERTISED_HOST", "gateway.example")),
          "not the pod's own name in switchyard-gateway"),
    Break("config", "the same id on every replica", edit_container(STS, GATEWAY, set_arg(4, "gw")),
          "each replica's id must be its own pod name"),
    Break("config", "memory below the gateway's buffers",
          edit_container(STS, GATEWAY, lambda c: c["resources"]["limits"].update(memory="512Mi")),
          "leaves no room above gateway.limits.buffer_bytes"),
    Break("config", "the users file not mounted",
          edit_container(STS, GATEWAY, lambda c: c["volumeMounts"][1].update(mountPath="/etc/users")),
          "gateway.sasl.users_file /etc/switchyard/gateway-users/users: not a key of a mounted Secret"),
    Break("config", "metrics annotated on another port",
          edit(DEP, MIRROR, lambda o: o["spec"]["template"]["metadata"]["annotations"].update(
              {"prometheus.io/port": "9465"})),
          "so must port 'metrics' and prometheus.io/port"),
    Break("config", "metrics on loopback",
          edit_container(DEP, WORKER, set_env("SWITCHYARD__TELEMETRY__PROMETHEUS_LISTEN", "127.0.0.1:9464")),
          "not reachable on the pod's IP"),
    Break("config", "a grace period shorter than the shutdown",
          edit(DEP, MIRROR, lambda o: o["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=10)),
          "terminationGracePeriodSeconds 10 < 30"),
    Break("config", "the webhook's token not given", edit_container(DEP, WEBHOOK, lambda c: c.pop("env")),
          "$ALERTMANAGER_TOKEN is not set or empty"),
    Break("config", "the webhook's probe on another path",
          edit_container(DEP, WEBHOOK, lambda c: c["readinessProbe"]["httpGet"].update(path="/readyz")),
          "readinessProbe must GET /healthz"),
    Break("config", "the canary's gateway unknown",
          edit_container(DEP, WORKER, set_env("SWITCHYARD__GATEWAY__ADVERTISED_HOST", "gateway")),
          "the drills' canary bootstraps to gateway:9192, which no Service here answers"),
    Break("config", "no ledger for the mirror", edit_container(DEP, MIRROR, lambda c: c["env"].pop(1)),
          "must be given one URL"),
]
# fmt: on


@pytest.mark.parametrize("mistake", BREAKS, ids=[f"{b.check}: {b.what}" for b in BREAKS])
def test_each_check_can_fail(deploy: Deploy, mistake: Break) -> None:
    broken = copy.deepcopy(deploy)
    mistake.change(broken)
    said = CHECKS[mistake.check](broken)
    assert any(mistake.says in problem for problem in said), (
        f"{mistake.check} did not notice {mistake.what}: {said}"
    )


def test_every_check_is_broken_once() -> None:
    assert {b.check for b in BREAKS} == set(CHECKS)
