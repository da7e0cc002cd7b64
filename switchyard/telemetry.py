"""Logging and OpenTelemetry, set up once per process from the configuration.

Every Switchyard process (CLI, worker, gateway, mirror, webhook receiver) calls :func:`setup` first.
Without ``telemetry.otlp_endpoint`` the SDK providers still exist, so instruments cost nothing and code
never checks whether telemetry is on; with it, traces and metrics go to the collector over OTLP/HTTP.
With ``telemetry.prometheus_listen`` the long-running processes also serve ``/metrics`` for a Prometheus
scrape, through the SDK's Prometheus exporter (beside OTLP when both are set).

Metric names: instruments are named ``switchyard.<part>.<what>`` with the unit in the name where
Prometheus wants it; the exporter turns dots into underscores, appends the unit (``s`` → ``_seconds``;
an annotation such as ``{record}`` adds nothing, so the name carries ``_records`` itself) and ``_total``
to counters. docs/operations.md lists what comes out.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any
from wsgiref.simple_server import WSGIServer

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from switchyard import __version__
from switchyard.config import Config, split_hostport
from switchyard.errors import ConfigError

_configured = False
_providers: tuple[Any, ...] = ()
_CHATTY_LOGGERS = ("alembic", "kazoo.client")
SCRAPED_SERVICES = frozenset({"gateway", "mirror", "worker", "webhook"})
"""The processes that serve ``telemetry.prometheus_listen``: a CLI command ends before any scrape, and
would take the port a process on the same host needs."""
_servers: list[WSGIServer] = []


class _JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def formatter(kind: str) -> logging.Formatter:
    """A line per record in ``logging.format``'s ``kind``, each naming its process: a gateway's processes
    write one log, and which of them served a connection is often the question."""
    if kind == "json":
        return _JsonFormatter()
    return logging.Formatter("%(asctime)s %(levelname)-7s %(name)s[%(process)d]: %(message)s")


def setup(config: Config, service: str) -> None:
    """Configure logging and the OpenTelemetry providers; later calls in the same process do nothing."""
    global _configured  # noqa: PLW0603 - process-wide, by design
    if _configured:
        return
    _configured = True

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(config.logging.format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.logging.level)
    if config.logging.level != "DEBUG":
        for chatty in _CHATTY_LOGGERS:  # their INFO lines narrate routine work (migrations, reconnects)
            logging.getLogger(chatty).setLevel(logging.WARNING)

    resource = Resource.create({"service.name": f"switchyard-{service}", "service.version": __version__})
    tracer_provider = TracerProvider(resource=resource)
    readers: list[MetricReader] = []
    endpoint = config.telemetry.otlp_endpoint
    if endpoint:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        base = endpoint.rstrip("/")
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(f"{base}/v1/traces")))
        readers.append(
            PeriodicExportingMetricReader(
                OTLPMetricExporter(f"{base}/v1/metrics"),
                export_interval_millis=config.telemetry.export_interval_s * 1000,
            )
        )
    listen = config.telemetry.prometheus_listen
    if listen and service in SCRAPED_SERVICES:
        readers.append(prometheus_reader(listen))
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=readers))
    global _providers  # noqa: PLW0603 - process-wide, by design
    _providers = (tracer_provider, metrics.get_meter_provider())
    logging.getLogger(__name__).debug(
        "telemetry ready (otlp=%s, prometheus=%s)", endpoint or "off", listen if readers else "off"
    )


def prometheus_reader(listen: str) -> MetricReader:
    """Serve ``/metrics`` on ``listen`` and return the reader that fills it at each scrape.

    The registry is this reader's own (plus the process and GC collectors), not ``prometheus_client``'s
    global one, so nothing else registered in the process leaks into the scrape. A port that cannot be
    bound raises ConfigError naming ``telemetry.prometheus_listen``.
    """
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import (
        CollectorRegistry,
        GCCollector,
        PlatformCollector,
        ProcessCollector,
        start_http_server,
    )

    registry = CollectorRegistry()
    host, port = split_hostport(listen)
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(f"telemetry.prometheus_listen: cannot listen on {listen}: {reason}") from None
    _servers.append(server)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    # Scope labels (otel_scope_name, ...) would repeat on every series what the switchyard_<part>_ prefix
    # already says.
    return PrometheusMetricReader(scope_info_enabled=False, registry=registry)


def shutdown() -> None:
    """Export what is still buffered (spans, the last metrics), stop the providers and the scrape
    endpoint."""
    for provider in _providers:
        try:
            provider.shutdown()
        except Exception:  # leaving anyway: a collector out of reach must not keep the process
            logging.getLogger(__name__).debug("telemetry shutdown failed", exc_info=True)
    while _servers:
        server = _servers.pop()
        server.shutdown()
        server.server_close()
