"""Install an OpenTelemetry SDK and exporters from config, for `horae worker`
or an application that wants ours. Needs the `horae[otel]` extra; never
called at import time, never forced on an embedding application."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.config import TelemetrySettings
from scheduler.errors import ConfigError


@dataclass
class Telemetry:
    """The installed providers; shutdown() flushes and stops the exporters."""

    tracer_provider: Any = None
    meter_provider: Any = None
    metrics_port: int = 0
    _servers: list[Any] = field(default_factory=list)

    def shutdown(self) -> None:
        for provider in (self.tracer_provider, self.meter_provider):
            if provider is not None:
                provider.shutdown()
        for server, thread in self._servers:
            server.shutdown()
            thread.join(timeout=2)


def setup_telemetry(settings: TelemetrySettings, metrics_port: int | None = None) -> Telemetry:
    """Set the global tracer and meter providers for the configured exporter.

    Args:
        settings: the [telemetry] section.
        metrics_port: serve Prometheus metrics on this port (overrides settings; 0 = off).
    """
    port = settings.metrics_port if metrics_port is None else metrics_port
    exporter = "prometheus" if port and settings.exporter == "none" else settings.exporter
    if exporter == "none":
        return Telemetry()
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ConfigError(f"telemetry exporter {exporter!r} needs the SDK: pip install 'horae[otel]' ({exc})") from exc

    resource = Resource.create({"service.name": settings.service_name})
    tracer_provider = TracerProvider(resource=resource)
    readers: list[Any] = []
    out = Telemetry(tracer_provider=tracer_provider)
    if exporter == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        tracer_provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
    elif exporter == "otlp":
        span_exporter, metric_exporter = _otlp(settings)
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
        readers.append(PeriodicExportingMetricReader(metric_exporter))
    if exporter == "prometheus" or port:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server

        readers.append(PrometheusMetricReader())
        out._servers.append(start_http_server(port or 9464, addr="0.0.0.0"))
        out.metrics_port = port or 9464
    from scheduler.metrics import histogram_views

    out.meter_provider = MeterProvider(resource=resource, metric_readers=readers, views=histogram_views())
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(out.meter_provider)
    return out


def _otlp(settings: TelemetrySettings) -> tuple[Any, Any]:
    endpoint = settings.otlp_endpoint or None
    if settings.otlp_protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetric
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpan

        base = endpoint.rstrip("/") if endpoint else None
        return (HttpSpan(endpoint=f"{base}/v1/traces" if base else None),
                HttpMetric(endpoint=f"{base}/v1/metrics" if base else None))
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=endpoint), OTLPMetricExporter(endpoint=endpoint)
