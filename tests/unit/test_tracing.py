"""The no-op tracer is detected (the hot path skips spans), a real one is not."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from scheduler.tracing import get_tracer, is_noop


def test_tracer_without_sdk_is_noop_and_sdk_tracer_is_not() -> None:
    assert is_noop(get_tracer()), "no global provider is installed in the test suite"
    assert is_noop(trace.NoOpTracer())
    provider = TracerProvider()
    assert not is_noop(provider.get_tracer("t"))
    provider.shutdown()
