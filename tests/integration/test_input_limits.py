"""Inputs the engine or the audit could not hold are refused at scheduling, naming the field,
with nothing written (issue 16): NUL and unpaired surrogates in names and JSON, JSON nested
too deeply or too large, instants past the year 9999, timeouts past 30 days; and a Redis
password never shows in a connection error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from horae.settings import load_settings
from listeners import ListenerRegistry
from scheduler import Dedupe, ScheduleError, StorageError
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import START_MS, make_scheduler


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


BAD_CALLS = [
    ("topic", lambda s: s.schedule_in("t\x00x", 0)),
    ("topic", lambda s: s.schedule_in("t\ud800", 0)),
    ("job_id", lambda s: s.schedule_in("t", 0, job_id="a\x00b")),
    ("key", lambda s: s.schedule_in("t", 0, key="k\x00")),
    ("dedupe.key", lambda s: s.schedule_in("t", 0, dedupe=Dedupe("d\udfff"))),
    ("payload", lambda s: s.schedule_in("t", 0, payload={"s": "a\x00b"})),
    ("payload", lambda s: s.schedule_in("t", 0, payload=["\ud83d"])),
    ("metadata", lambda s: s.schedule_in("t", 0, metadata={"m": "\x00"})),
    ("payload", lambda s: s.schedule_in("t", 0, payload=nested(100_000))),
    ("payload", lambda s: s.schedule_in("t", 0, payload="x" * (512 * 1024))),
    ("delay", lambda s: s.schedule_in("t", 1e20)),
    ("delay", lambda s: s.schedule_in("t", "99999999999d")),
    ("timeout", lambda s: s.schedule_in("t", 0, timeout=1e30)),
    ("timeout", lambda s: s.schedule_in("t", 0, timeout=timedelta(days=31))),
    (
        "run_at",
        lambda s: s.schedule_at(
            "t", datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-2)))
        ),
    ),
    ("items[0].delay", lambda s: s.schedule_many([{"topic": "t", "delay": 1e20}])),
    ("name", lambda s: s.schedule_cron("c\x00", "* * * * *", topic="t")),
]


@pytest.mark.parametrize(
    ("field", "call"), BAD_CALLS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD_CALLS)]
)
async def test_unstorable_input_is_refused_naming_the_field_and_nothing_is_written(
    redis_url: str,
    namespace: str,
    redis: Any,
    field: str,
    call: Any,
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), FakeClock(START_MS)) as s:
        with pytest.raises(ScheduleError) as info:
            await call(s)
        assert info.value.field == field, str(info.value)
        assert await redis.keys(f"{{{namespace}}}:*") == []


async def test_what_is_still_allowed(redis_url: str, database_url: str, namespace: str) -> None:
    from tests.integration.engine_fixtures import audited_scheduler

    async with audited_scheduler(
        redis_url, database_url, namespace, ListenerRegistry(), FakeClock(START_MS)
    ) as s:
        ok = await s.schedule_in(
            "t",
            0,
            payload={"s": "\\u0000 is text here", "emoji": "\U0001f600"},
            timeout=timedelta(days=30),
        )
        far = await s.schedule_at("t", datetime(9999, 12, 31, 23, 59, tzinfo=UTC))
        info = await s.get_job(ok)
        assert info is not None and info.payload == {
            "s": "\\u0000 is text here",
            "emoji": "\U0001f600",
        }
        assert (await s.get_job(far)) is not None
        await s.start_relay()
        await s.audit.flush()
        record = await s.audit.get(ok)
        assert record is not None and record.payload == info.payload, (
            "the audit stores what was allowed"
        )
        assert await s.audit.get("a\x00b") is None and await s.audit.attempts("a\ud800") == []


async def test_a_redis_password_never_shows_in_a_connection_error(namespace: str) -> None:
    from scheduler import Scheduler

    # the audit relay off: nothing must look for (or start) a PostgreSQL server
    settings = load_settings(
        path=None,
        env={"HORAE_AUDIT__RELAY": "false"},
        redis_url="redis://:s3cr3t-pw@127.0.0.1:1/0",
        namespace=namespace,
    )
    with pytest.raises(StorageError) as info:
        async with Scheduler(settings=settings, listeners=ListenerRegistry()):
            pass
    assert "s3cr3t-pw" not in str(info.value) and "***" in str(info.value)
    assert "s3cr3t-pw" not in repr(info.value.__cause__)
