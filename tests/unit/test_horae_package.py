"""`import horae` is the public face: scheduler's whole public API plus the
application-facing names of listeners, the same objects, loaded lazily."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import horae
import listeners
import scheduler

HEAVY = ("redis", "hiredis", "opentelemetry")
# listeners' names for applications; dispatch internals stay in listeners.
LISTENER_NAMES = (
    "InvalidDeclaration",
    "Listener",
    "ListenerRegistry",
    "PayloadRejected",
    "ScheduleArrivedEvent",
    "ScheduleFailedEvent",
    "Schema",
    "Validator",
    "default_registry",
    "on_event",
)


def test_all_is_sorted_and_is_scheduler_api_plus_the_listener_names() -> None:
    assert horae.__all__ == sorted(horae.__all__)
    assert horae.__all__ == sorted(horae._SOURCES)
    assert set(LISTENER_NAMES) <= set(listeners.__all__)
    assert set(horae.__all__) == set(scheduler.__all__) | set(LISTENER_NAMES)


def test_every_name_is_the_implementation_object() -> None:
    for name in scheduler.__all__:
        assert getattr(horae, name) is getattr(scheduler, name), name
        assert horae._SOURCES[name] == scheduler._SOURCES[name], name
    for name in LISTENER_NAMES:
        assert getattr(horae, name) is getattr(listeners, name), name
    from horae import (
        Backoff,
        Dedupe,
        JobState,
        RateLimit,
        RetryPolicy,
        Scheduler,
        ScheduleResult,
        TopicOptions,
        on_event,
    )
    from scheduler.api import Scheduler as Impl

    assert Scheduler is Impl and on_event is listeners.on_event
    assert {Backoff, Dedupe, JobState, RateLimit, RetryPolicy, ScheduleResult, TopicOptions}


def test_import_horae_loads_neither_redis_nor_opentelemetry() -> None:
    code = (
        "import sys, horae\n"
        "from horae import on_event, ScheduleArrivedEvent, "
        "SchedulerError, JobState, RetryPolicy, Backoff\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "assert not heavy, heavy\n"
        "assert 'scheduler.api' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_dir_lists_the_public_names_and_unknown_ones_fail() -> None:
    assert set(horae.__all__) <= set(dir(horae))
    with pytest.raises(AttributeError, match="module 'horae' has no attribute 'NoSuchName'"):
        horae.NoSuchName  # noqa: B018


def test_readme_code_imports_from_horae_names_it_exports() -> None:
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "README.md"
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), re.DOTALL)
    code = "\n".join(blocks)
    assert "from scheduler import" not in code and "from listeners import" not in code
    imported = {
        n.strip()
        for group in re.findall(r"^from horae import (.+)$", code, re.MULTILINE)
        for n in group.split(",")
    }
    assert {"Scheduler", "on_event", "ScheduleArrivedEvent"} <= imported <= set(horae.__all__)
    compile(blocks[0], "README quick start", "exec")
    assert 'job_id="' in blocks[0] and "timeout=" in blocks[0]
