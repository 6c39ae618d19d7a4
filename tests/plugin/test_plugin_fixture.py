"""The `horae` fixture itself: a Scheduler on a namespace and an audit schema of its own,
both deleted afterwards; the marker's options, checked; the audit switched off without
PostgreSQL; a clear error when PostgreSQL is needed and missing; the plugin installed by
its entry point and light to load."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import psutil
import pytest
import redis.asyncio as aioredis

from horae import ConfigError, ListenerRegistry, Scheduler
from horae.settings import Settings
from horae.testing import SchedulerUnderTest, TimeMachine
from scheduler.core.keys import Keys
from scheduler.testing.plugin import DEFAULT_START, _checked
from scheduler.testing.under_test import Options, scheduler_under_test, with_search_path

ROOT = Path(__file__).resolve().parents[2]


async def _keys(redis_url: str, namespace: str) -> list[bytes]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        return [k async for k in client.scan_iter(match=Keys(namespace).prefix + "*")]
    finally:
        await client.aclose()


async def _schemas(dsn: str, like: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return [
            r[0]
            for r in await conn.fetch("SELECT nspname FROM pg_namespace WHERE nspname = $1", like)
        ]
    finally:
        await conn.close()


async def test_horae_is_a_connected_scheduler_on_the_time_machines_clock(
    horae: Any, horae_clock: Any
) -> None:
    assert isinstance(horae, Scheduler) and isinstance(horae, SchedulerUnderTest)
    assert isinstance(horae_clock, TimeMachine) and horae.time_machine is horae_clock
    assert horae_clock.now() == DEFAULT_START == datetime(2030, 1, 1, tzinfo=UTC)
    assert horae.clock.now_ms() == horae_clock.now_ms()
    assert horae.settings.namespace.startswith("horae-test-")
    [worker] = await horae.workers()
    assert worker.id == horae_clock.worker.id


@pytest.mark.horae(start=datetime(2026, 3, 8, 7, 59, tzinfo=UTC))
async def test_the_marker_sets_the_first_instant(horae_clock: Any) -> None:
    assert horae_clock.now() == datetime(2026, 3, 8, 7, 59, tzinfo=UTC)


def test_marker_options_are_checked_naming_the_option_and_what_is_allowed() -> None:
    assert _checked({"start": "2026-10-31T12:00:00Z", "raise_errors": False, "audit": True}) == {
        "start": datetime(2026, 10, 31, 12, tzinfo=UTC),
        "raise_errors": False,
        "audit": True,
    }
    assert _checked({"start": "2026-10-31T07:00:00-05:00"})["start"] == datetime(
        2026, 10, 31, 12, tzinfo=UTC
    )
    for given, message in (
        ({"speed": 2}, "unknown option 'speed'; allowed: raise_errors, start, audit"),
        ({"raise_errors": "no"}, r"raise_errors=...\) must be True or False; got 'no'"),
        ({"start": "2026-10-31T12:00:00"}, "start=.*aware datetime.*got '2026-10-31T12:00:00'"),
        ({"start": "tomorrow"}, "start=.*got 'tomorrow'"),
        ({"start": datetime(2026, 1, 1)}, "start=.*aware"),
    ):
        with pytest.raises(pytest.UsageError, match=message):
            _checked(given)


def test_search_path_is_added_to_the_dsn_and_replaces_one_given() -> None:
    assert (
        with_search_path("postgresql://u:p@h:5/db", "s1")
        == "postgresql://u:p@h:5/db?search_path=s1"
    )
    assert with_search_path("postgresql:///db?host=/tmp&search_path=x", "s2") == (
        "postgresql:///db?host=%2Ftmp&search_path=s2"
    )


def _relay_children() -> list[int]:
    """Running relay children of this process (one that exited, a zombie included, is none)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "audit.relay.child" in " ".join(child.cmdline()):
                found.append(child.pid)
        except psutil.Error:  # gone or a zombie while we looked
            continue
    return found


async def test_namespace_and_audit_schema_are_its_own_and_deleted_afterwards(
    horae_settings: Settings, server_dsn: str
) -> None:
    registry = ListenerRegistry()
    seen: list[Any] = []
    registry.add("plugin.fx.job", lambda event: seen.append(event.payload))
    async with scheduler_under_test(horae_settings, Options(), registry, DEFAULT_START) as s:
        namespace = s.settings.namespace
        schema = namespace.replace("horae-test-", "horae_test_")
        assert s.settings.database_url == with_search_path(server_dsn, schema)
        await s.schedule_in("plugin.fx.job", "1h", payload={"n": 1})
        await s.time_machine.advance("1h")
        [job] = await s.ran("plugin.fx.job")
        assert seen == [{"n": 1}] and [r.outcome for r in job.runs] == ["succeeded"]
        assert await _keys(horae_settings.redis_url or "", namespace)
        assert await _schemas(server_dsn, schema) == [schema]
        # embedded use: the relay on a thread of the test's process, no child spawned
        assert not s.settings.audit.relay_process and not _relay_children()
    assert await _keys(horae_settings.redis_url or "", namespace) == []
    assert await _schemas(server_dsn, schema) == []


async def test_without_the_audit_no_postgresql_is_needed_and_runs_are_empty(
    horae_settings: Settings,
) -> None:
    registry = ListenerRegistry()
    registry.add("plugin.fx.job", lambda event: None)
    nowhere = horae_settings.model_copy(
        update={"database_url": "postgresql://nobody@127.0.0.1:9/none"}
    )
    async with scheduler_under_test(nowhere, Options(audit=False), registry, DEFAULT_START) as s:
        await s.schedule_in("plugin.fx.job", "5m")
        await s.time_machine.advance("5m")
        [job] = await s.ran()
        assert job.attempts == 1 and job.runs == ()


async def test_an_unreachable_audit_database_is_a_clear_error_with_the_password_masked(
    horae_settings: Settings,
) -> None:
    nowhere = horae_settings.model_copy(
        update={"database_url": "postgresql://u:s3cret@127.0.0.1:9/none"}
    )
    with pytest.raises(
        ConfigError, match=r"audit database postgresql://u:\*\*\*@127.0.0.1:9/none.*audit=False"
    ) as e:
        async with scheduler_under_test(nowhere, Options(), ListenerRegistry(), DEFAULT_START):
            pass
    assert "s3cret" not in str(e.value)


def test_the_plugin_is_declared_as_a_pytest11_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"horae": "scheduler.testing.plugin"}
    assert {"pytest", "pytest-asyncio"} <= {
        r.split(">")[0] for r in project["optional-dependencies"]["testing"]
    }
    installed = [
        ep
        for ep in importlib.metadata.entry_points(group="pytest11")
        if ep.value == "scheduler.testing.plugin"
    ]
    metadata = importlib.metadata.distribution("horae").entry_points
    if any(
        ep.group == "pytest11" for ep in metadata
    ):  # installed from this pyproject (pip install -e .)
        assert [(ep.name, ep.value) for ep in installed] == [("horae", "scheduler.testing.plugin")]


def test_loading_the_plugin_imports_neither_redis_nor_opentelemetry() -> None:
    code = (
        "import sys, scheduler.testing.plugin\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('redis', 'hiredis', 'opentelemetry'))\nassert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
