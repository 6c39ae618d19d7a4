"""The console's rollups (migration 0010) as the relay keeps them: for a run with completions,
retries and failures they equal what the audit's own rows say, minute by minute and hour by
hour; a batch delivered again adds nothing; the relay's queue-depth sample holds Redis's
counts."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import redis.asyncio as aioredis

from audit.migrate import migrate_url
from audit.options import RelayOptions
from audit.relay.consumer import AuditRelay
from audit.relay.foldcache import FoldCache
from audit.relay.streamid import parse_id
from audit.relay.writer import BatchWriter
from audit.rollups import BUCKETS, bucket_of
from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState
from scheduler.core.outbox import decode_entry
from scheduler.core.timeutil import ms_to_utc
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import START_MS, audited_scheduler, eventually, in_state

RETRY_1S = {"attempts": 3, "backoff": {"type": "fixed", "delay": 1_000}}
FAIL_TWICE = {"attempts": 2, "backoff": {"type": "fixed", "delay": 1_000}}
COUNTS = ("completed", "failed", "failed_attempts", "retried")


async def rollups(conn: asyncpg.Connection, table: str, at: str) -> dict[tuple[str, Any], Any]:
    rows = await conn.fetch(
        f"SELECT topic, {at} AS at, completed, failed, failed_attempts, retried, lateness "
        f"FROM {table}"
    )
    return {
        (r["topic"], r["at"]): (*(r[c] for c in COUNTS), list(r["lateness"]) or [0] * BUCKETS)
        for r in rows
        if any(r[c] for c in COUNTS) or any(r["lateness"])
    }


async def expected(conn: asyncpg.Connection, unit: str) -> dict[tuple[str, Any], Any]:
    """The rollups as the audit's job and attempt rows say they must be."""
    cells: dict[tuple[str, Any], list[Any]] = {}

    def cell(topic: str, at: Any) -> list[Any]:
        return cells.setdefault((topic, at), [0, 0, 0, 0, [0] * BUCKETS])

    for r in await conn.fetch(
        f"SELECT topic, date_trunc('{unit}', completed_at) AS at FROM schedule_audit "
        "WHERE status = 'completed'"
    ):
        cell(r["topic"], r["at"])[0] += 1
    for r in await conn.fetch(
        f"SELECT topic, date_trunc('{unit}', failed_at) AS at FROM schedule_audit "
        "WHERE status = 'failed'"
    ):
        cell(r["topic"], r["at"])[1] += 1
    attempts = await conn.fetch(
        f"SELECT j.topic, date_trunc('{unit}', a.finished_at) AS ended, "
        f"date_trunc('{unit}', a.started_at) AS began, a.outcome, a.lateness_ms, "
        "a.attempt_no, j.attempts, j.status "
        "FROM schedule_attempts a JOIN schedule_audit j ON j.id = a.job_id"
    )
    for r in attempts:
        if r["outcome"] in ("failed", "timed_out", "worker_lost"):
            cell(r["topic"], r["ended"])[2] += 1
            if not (r["status"] == "failed" and r["attempt_no"] == r["attempts"]):
                cell(r["topic"], r["ended"])[3] += 1  # (the settlement is the attempt's end)
        cell(r["topic"], r["began"])[4][bucket_of(r["lateness_ms"])] += 1
    return {k: tuple(v) for k, v in cells.items()}


async def test_the_relays_rollups_equal_the_audit_rows(
    redis_url: str,
    database_url: str,
    namespace: str,
    redis: aioredis.Redis,
    relay_options: RelayOptions,
) -> None:
    reg, clock = ListenerRegistry(), FakeClock(START_MS + 50_000)  # a minute turns mid-run

    @reg.on_event("ok")
    async def ok(event: ScheduleArrivedEvent) -> None:
        pass

    @reg.on_event("flaky")
    async def flaky(event: ScheduleArrivedEvent) -> None:
        if event.attempt == 1:
            raise RuntimeError("first time fails")

    @reg.on_event("bad")
    async def bad(event: ScheduleArrivedEvent) -> None:
        raise ValueError("always fails")

    async with audited_scheduler(redis_url, database_url, namespace, reg, clock) as s:
        done = [await s.schedule_in("ok", 0) for _ in range(3)]
        retried = [await s.schedule_in("flaky", 0, retry=RETRY_1S) for _ in range(2)]
        failing = [await s.schedule_in("bad", 0, retry=FAIL_TWICE) for _ in range(2)]
        later = await s.schedule_in("ok", 30)  # due next minute, starts 45 s late
        async with s.worker():
            for job_id in retried + failing:
                await eventually(
                    lambda j=job_id: in_state(s, j, JobState.RETRYING, 1), what="attempt 1 failed"
                )
            clock.advance(75)  # into the next minute: the retries and `later` run there
            for job_id in [*done, *retried, *failing, later]:
                await s.wait(job_id, timeout=10)
        await s.audit.flush(timeout=10)

    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("SET TimeZone = 'UTC'")
        minutes = await rollups(conn, "schedule_minute_rollups", "minute")
        assert minutes == await expected(conn, "minute")
        assert {k[1] for k in minutes} == {ms_to_utc(START_MS), ms_to_utc(START_MS + 120_000)}
        totals = {
            t: [sum(v[i] for k, v in minutes.items() if k[0] == t) for i in range(4)]
            for t in ("ok", "flaky", "bad")
        }
        assert totals == {"ok": [4, 0, 0, 0], "flaky": [2, 0, 2, 2], "bad": [0, 2, 4, 2]}
        assert await rollups(conn, "schedule_hour_rollups", "hour") == await expected(conn, "hour")

        # A batch delivered again (a relay died before acknowledging it) adds nothing.
        before = await conn.fetch("SELECT * FROM schedule_minute_rollups ORDER BY topic, minute")
        events = [
            decode_entry(f"{r['stream_ms']}-{r['stream_seq']}", json.loads(r["fields"]))
            for r in await conn.fetch(
                "SELECT stream_ms, stream_seq, fields::text AS fields FROM schedule_events "
                "ORDER BY stream_ms, stream_seq"
            )
        ]
        writer = BatchWriter(database_url, relay_options, FoldCache(10))
        try:
            assert await writer.write([(parse_id(e.stream_id), e) for e in events]) == 0
        finally:
            await writer.close()
        after = await conn.fetch("SELECT * FROM schedule_minute_rollups ORDER BY topic, minute")
        assert after == before
    finally:
        await conn.close()


async def test_the_queue_depth_sample_holds_the_counts(
    redis_url: str,
    database_url: str,
    namespace: str,
    redis: aioredis.Redis,
    relay_options: RelayOptions,
) -> None:
    reg, clock = ListenerRegistry(), FakeClock(START_MS)
    async with audited_scheduler(redis_url, database_url, namespace, reg, clock) as s:
        for _ in range(3):
            await s.schedule_in("waits", 3600)
        await s.schedule_in("other", 3600)
    relay = AuditRelay(redis, namespace, database_url, relay_options)
    try:
        sampled = await relay.depth.sample(START_MS + 61_000)
        again = await relay.depth.sample(START_MS + 62_000)  # same minute: replaced, not added
    finally:
        await relay.depth.aclose()
        await relay.writer.close()
    assert {(d.topic, d.waiting, d.retrying) for d in sampled} == {
        ("waits", 3, 0),
        ("other", 1, 0),
    }
    assert again == sampled
    conn = await asyncpg.connect(database_url)
    try:
        minute = ms_to_utc(START_MS + 60_000)
        rows = await conn.fetch(
            "SELECT topic, minute, waiting, retrying FROM schedule_minute_rollups ORDER BY topic"
        )
        assert [tuple(r) for r in rows] == [("other", minute, 1, 0), ("waits", minute, 3, 0)]
        hours = await conn.fetch("SELECT topic, hour, waiting FROM schedule_hour_rollups")
        assert {tuple(r) for r in hours} == {
            ("other", minute - timedelta(minutes=minute.minute), 1),
            ("waits", minute - timedelta(minutes=minute.minute), 3),
        }
    finally:
        await conn.close()


async def test_a_relay_role_granted_before_the_rollups_goes_on_without_them(
    database_url: str,
    redis: aioredis.Redis,
    namespace: str,
    outbox: Any,
    relay_options: RelayOptions,
    drain: Callable[[AuditRelay], Awaitable[int]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A relay role granted before migration 0010 (no right on the rollups) writes every
    event and says once what to run; it never parks a batch for the charts' sake."""
    caplog.set_level(logging.WARNING, logger="horae.audit")
    await migrate_url(database_url)
    role = f"horae_relay_{uuid.uuid4().hex[:12]}"
    owner = await asyncpg.connect(database_url)
    try:
        await owner.execute(f'CREATE ROLE "{role}" LOGIN')
        await owner.execute("SELECT audit_grant($1, 'relay')", role)
        await owner.execute(
            f'REVOKE ALL ON schedule_minute_rollups, schedule_hour_rollups FROM "{role}"'
        )
        parts = urlsplit(database_url)
        where = parts.netloc.rsplit("@", 1)[-1]  # (host and port as given: maybe neither)
        as_role = urlunsplit(parts._replace(netloc=f"{role}@{where}"))
        for i in range(3):
            job = f"job-{i}"
            await outbox.scheduled(job)
            outbox.tick(10)
            await outbox.started(job, 1, due=outbox.now)
            outbox.tick(10)
            await outbox.completed(job, 1)
        relay = AuditRelay(redis, namespace, as_role, relay_options)
        try:
            assert await drain(relay) == 9
            await relay.depth.sample()  # (nothing written: no right to, no error either)
        finally:
            await relay.stop()
        assert relay.writer.rollups is False
        done = await owner.fetchval(
            "SELECT count(*) FROM schedule_audit WHERE status = 'completed'"
        )
        assert done == 3
        assert await owner.fetchval("SELECT count(*) FROM schedule_minute_rollups") == 0
        warned = [r.getMessage() for r in caplog.records if r.name == "horae.audit"]
        assert len(warned) == 1 and "horae audit grant ROLE relay" in warned[0], warned

        # Granted again: the next relay keeps them.
        await owner.execute("SELECT audit_grant($1, 'relay')", role)
        await outbox.scheduled("job-9")
        outbox.tick(10)
        await outbox.completed("job-9", 1)
        relay = AuditRelay(redis, namespace, as_role, relay_options)
        try:
            assert await drain(relay) == 2
        finally:
            await relay.stop()
        assert relay.writer.rollups is True
        assert await owner.fetchval("SELECT sum(completed) FROM schedule_minute_rollups") == 1
    finally:
        await owner.execute(f'DROP OWNED BY "{role}"')
        await owner.execute(f'DROP ROLE IF EXISTS "{role}"')
        await owner.close()
