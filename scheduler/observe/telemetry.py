"""Install an OpenTelemetry SDK and exporters from config, for `horae worker`
and for any process whose Scheduler connects with `[telemetry]` set (producers
too). Needs the `horae[otel]` extra; never called at import time, never forced
on an embedding application ("none", the default, installs nothing).

The providers are process-wide (OpenTelemetry's globals): the first call installs
them, later calls (more Schedulers, the worker command then its Scheduler) reuse them."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.config import TelemetrySettings
from scheduler.core.errors import ConfigError


@dataclass
class Telemetry:
    """The installed providers; shutdown() flushes and stops the exporters."""

    tracer_provider: Any = None
    meter_provider: Any = None
    metrics_port: int = 0
    metrics_host: str = ""
    _servers: list[Any] = field(default_factory=list)

    def shutdown(self) -> None:
        global _installed
        if _installed is self:
            _installed = None
        for provider in (self.tracer_provider, self.meter_provider):
            if provider is not None:
                provider.shutdown()
        for server, thread in self._servers:
            server.shutdown()
            thread.join(timeout=2)


log = logging.getLogger("horae.telemetry")
_installed: Telemetry | None = None  # this process's providers, once installed


def wanted(settings: TelemetrySettings) -> bool:
    """Whether the settings ask for an exporter (a Scheduler then installs one on connect)."""
    return settings.exporter != "none" or settings.metrics_port != 0


def setup_telemetry(
    settings: TelemetrySettings, metrics_port: int | None = None, metrics_host: str | None = None
) -> Telemetry:
    """Set the global tracer and meter providers for the configured exporter, once per process
    (a later call returns the installed providers, whatever its settings).

    Args:
        settings: the [telemetry] section.
        metrics_port: serve Prometheus metrics on this port (overrides settings; 0 = off).
        metrics_host: on this address (overrides settings; "" = loopback, or every interface
            in a container: health.bind_host).

    Raises:
        ConfigError: the SDK is missing, or the metrics port is taken.
    """
    global _installed
    if _installed is not None:
        return _installed
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
        raise ConfigError(
            f"telemetry exporter {exporter!r} needs the SDK: pip install 'horae[otel]' ({exc})"
        ) from exc

    if isinstance(metrics.get_meter_provider(), MeterProvider):
        log.warning(
            "an OpenTelemetry SDK is already installed in this process: [telemetry] exporter %r "
            "not installed (the application's own exporters get horae's metrics)",
            exporter,
        )
        return Telemetry()
    resource = Resource.create({"service.name": settings.service_name})
    tracer_provider = TracerProvider(resource=resource, sampler=sampler_of(settings))
    readers: list[Any] = []
    out = Telemetry(tracer_provider=tracer_provider)
    if exporter == "console":
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            PeriodicExportingMetricReader,
        )
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

        from scheduler.observe.health import bind_host

        host = bind_host(settings.metrics_host if metrics_host is None else metrics_host)
        try:
            out._servers.append(start_http_server(port or 9464, addr=host))
        except OSError as exc:
            raise ConfigError(
                f"cannot serve metrics on {host}:{port or 9464} ({exc}): give each process "
                "its own [telemetry] metrics_port (HORAE_TELEMETRY__METRICS_PORT) and a "
                "metrics_host of this machine"
            ) from exc
        out.metrics_host = host
        readers.append(PrometheusMetricReader())
        out.metrics_port = port or 9464
    from scheduler.observe.metrics import histogram_views

    out.meter_provider = MeterProvider(
        resource=resource, metric_readers=readers, views=histogram_views()
    )
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(out.meter_provider)
    _installed = out
    return out


def sampler_of(settings: TelemetrySettings) -> Any:
    """The configured sampler; None (the SDK reads OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG,
    default parentbased_always_on) when [telemetry] sampler is unset or the environment names one:
    the standard variables win, as every OpenTelemetry SDK lets operators expect."""
    if not settings.sampler or os.environ.get("OTEL_TRACES_SAMPLER"):
        return None
    from opentelemetry.sdk.trace import sampling

    ratio = settings.sample_ratio
    root: Any = (
        sampling.TraceIdRatioBased(ratio)
        if settings.sampler.endswith("traceidratio")
        else sampling.ALWAYS_OFF
        if settings.sampler.endswith("always_off")
        else sampling.ALWAYS_ON
    )
    return sampling.ParentBased(root) if settings.sampler.startswith("parentbased_") else root


def _otlp(settings: TelemetrySettings) -> tuple[Any, Any]:
    endpoint = settings.otlp_endpoint or None
    if settings.otlp_protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HttpMetric,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpSpan,
        )

        base = endpoint.rstrip("/") if endpoint else None
        return (
            HttpSpan(endpoint=f"{base}/v1/traces" if base else None),
            HttpMetric(endpoint=f"{base}/v1/metrics" if base else None),
        )
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=endpoint), OTLPMetricExporter(endpoint=endpoint)
