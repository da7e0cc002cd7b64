"""Logging and OpenTelemetry, set up once per process from the configuration.

Every Switchyard process (CLI, worker, gateway, mirror, webhook receiver) calls :func:`setup` first.
Without ``telemetry.otlp_endpoint`` the SDK providers still exist, so instruments cost nothing and code
never checks whether telemetry is on; with it, traces and metrics go to the collector over OTLP/HTTP.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from switchyard import __version__
from switchyard.config import Config

_configured = False
_providers: tuple[Any, ...] = ()
_CHATTY_LOGGERS = ("alembic", "kazoo.client")


class _JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup(config: Config, service: str) -> None:
    """Configure logging and the OpenTelemetry providers; later calls in the same process do nothing."""
    global _configured  # noqa: PLW0603 - process-wide, by design
    if _configured:
        return
    _configured = True

    handler = logging.StreamHandler(sys.stderr)
    if config.logging.format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.logging.level)
    if config.logging.level != "DEBUG":
        for chatty in _CHATTY_LOGGERS:  # their INFO lines narrate routine work (migrations, reconnects)
            logging.getLogger(chatty).setLevel(logging.WARNING)

    resource = Resource.create({"service.name": f"switchyard-{service}", "service.version": __version__})
    tracer_provider = TracerProvider(resource=resource)
    readers = []
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
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=readers))
    global _providers  # noqa: PLW0603 - process-wide, by design
    _providers = (tracer_provider, metrics.get_meter_provider())
    logging.getLogger(__name__).debug("telemetry ready (otlp=%s)", endpoint or "off")


def shutdown() -> None:
    """Export what is still buffered (spans, the last metrics) and stop the providers."""
    for provider in _providers:
        try:
            provider.shutdown()
        except Exception:  # leaving anyway: a collector out of reach must not keep the process
            logging.getLogger(__name__).debug("telemetry shutdown failed", exc_info=True)
