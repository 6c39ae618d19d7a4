"""The package's public names load lazily: the error tree and the outbox format
import without redis, hiredis or OpenTelemetry (the audit, migrations and Spark
child rely on it), and every name in __all__ still resolves."""

from __future__ import annotations

import subprocess
import sys

import pytest

import scheduler

HEAVY = ("redis", "hiredis", "opentelemetry")


def test_errors_and_outbox_import_without_redis_or_opentelemetry() -> None:
    code = (
        "import sys, scheduler.core.errors, scheduler.core.outbox, scheduler.core.job\n"
        "from scheduler import SchedulerError, JobState, SCHEDULE_FAILED_TOPIC\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_audit_imports_without_a_cycle_and_its_pure_parts_without_redis() -> None:
    code = (
        "import sys, audit.relay.fold, audit.migrate, audit.analytics.pipeline\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "assert not heavy, heavy\n"
        # each module imported first, in a fresh process: no cycle
        "import audit.relay.consumer, audit.reader\n"
        "from audit import AuditRelay, AuditTrail, RelayOptions\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_public_name_resolves_to_its_module() -> None:
    assert scheduler.__all__ == sorted(scheduler._SOURCES)
    for name in scheduler.__all__:
        value = getattr(scheduler, name)
        assert getattr(value, "__module__", scheduler._SOURCES[name]) == scheduler._SOURCES[name], (
            name
        )
    assert scheduler.SCHEDULE_FAILED_TOPIC == "schedule.failed"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchName"):
        scheduler.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
