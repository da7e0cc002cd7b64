"""An OTLP/HTTP endpoint for tests (metrics and spans), and quantiles read off the histograms it receives."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str


class OtlpReceiver:
    """An OTLP/HTTP endpoint that keeps the latest value of each series and every span it is sent, for
    tests to read. Only the latest: one receiver serves a test worker's whole session, whose processes
    export every second, and a list of every point grew for twenty minutes and was scanned at each look."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
        )
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        points: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        histograms: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[list[float], list[int]]] = {}
        spans: list[Span] = []
        self.points, self.histograms, self.spans = points, histograms, spans

        def keep_spans(body: bytes) -> None:
            for resource in ExportTraceServiceRequest.FromString(body).resource_spans:
                named = {a.key: a.value.string_value for a in resource.resource.attributes}
                service = named.get("service.name", "")
                for scope in resource.scope_spans:
                    spans.extend(
                        Span(service, s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex())
                        for s in scope.spans
                    )

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path.endswith("/v1/traces"):
                    keep_spans(body)
                    self.send_response(200)
                    self.end_headers()
                    return
                export = ExportMetricsServiceRequest.FromString(body)
                for resource in export.resource_metrics:
                    for scope in resource.scope_metrics:
                        for metric in scope.metrics:
                            kind = metric.WhichOneof("data") or ""
                            for point in getattr(metric, kind).data_points:
                                labels = {
                                    a.key: str(
                                        getattr(a.value, a.value.WhichOneof("value") or "string_value")
                                    )
                                    for a in point.attributes
                                }
                                if kind == "histogram":
                                    histograms[(metric.name, tuple(sorted(labels.items())))] = (
                                        list(point.explicit_bounds),
                                        list(point.bucket_counts),
                                    )
                                value = (
                                    point.count if kind == "histogram" else point.as_int or point.as_double
                                )
                                points[(metric.name, tuple(sorted(labels.items())))] = float(value)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def latest(self, name: str, **labels: str) -> float:
        """The last reported value of metric ``name`` at the points whose attributes include ``labels``."""
        return sum(
            value
            for (metric, attributes), value in list(self.points.items())
            if metric == name and labels.items() <= dict(attributes).items()
        )

    def histogram(self, name: str, **labels: str) -> tuple[list[float], list[int]]:
        """The latest report of histogram ``name`` (cumulative): bucket bounds and counts."""
        for (metric, attributes), found in list(self.histograms.items()):
            if metric == name and labels.items() <= dict(attributes).items():
                return found
        return [], [0]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def bucket_quantile(bounds: list[float], counts: list[int], q: float) -> float:
    """The upper bound of the histogram bucket that holds quantile ``q`` (inf for the overflow bucket)."""
    rank, seen = q * sum(counts), 0
    for bound, count in zip([*bounds, float("inf")], counts, strict=True):
        seen += count
        if seen >= rank:
            return bound
    return float("inf")
