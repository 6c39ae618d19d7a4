"""The audit reads the console's pages make (audit/reader.py), on a real PostgreSQL: the
operator action log of one target and of all, newest first and bounded; the overview's
jobs that ended in the last hour, per topic."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
import redis.asyncio as aioredis

from audit.options import RelayOptions
from audit.reader import AuditTrail
from horae.settings import load_settings


@pytest.fixture
async def trail(redis_url: str, namespace: str, database_url: str) -> AsyncIterator[AuditTrail]:
    client = aioredis.from_url(redis_url)
    audit = AuditTrail(
        client, namespace, database_url, RelayOptions.from_settings(load_settings(env={}).audit)
    )
    await audit.open()
    try:
        yield audit
    finally:
        await audit.close()
        await client.aclose()


async def test_actions_of_one_target_and_of_all_newest_first(trail: AuditTrail) -> None:
    for i, target in enumerate(["job-a", "job-b", "job-a", "cron:nightly", "job-a"]):
        await trail.record_action("ann", "operator", f"act{i}", target, "done", {"n": i})

    mine = await trail.actions("job-a")
    assert [(a.target, a.action, a.detail) for a in mine] == [
        ("job-a", "act4", {"n": 4}),
        ("job-a", "act2", {"n": 2}),
        ("job-a", "act0", {"n": 0}),
    ]
    assert [a.action for a in await trail.actions("job-a", 2)] == ["act4", "act2"]
    assert await trail.actions("job-none") == []
    assert [a.action for a in await trail.actions()] == ["act4", "act3", "act2", "act1", "act0"]
    assert [a.target for a in await trail.actions(None, 2)] == ["job-a", "cron:nightly"]


async def test_finished_since_counts_jobs_that_completed_or_failed_for_good(
    trail: AuditTrail, database_url: str
) -> None:
    """The overview's last hour: jobs by how they ended (whatever attempt, or no listener,
    completed them), not attempts; older ends, a cancelled job whose attempt succeeded and
    a job still retrying are not counted."""
    now = datetime.now(UTC)
    created = now - timedelta(hours=3)
    ago = lambda minutes: now - timedelta(minutes=minutes)  # noqa: E731
    # id, topic, status, completed_at, failed_at, cancelled_at, attempts (finished, outcome)
    jobs = [
        (
            "a",
            "t1",
            "completed",
            ago(10),
            None,
            None,
            [(ago(20), "failed"), (ago(10), "succeeded")],
        ),
        ("b", "t1", "completed", ago(120), None, None, [(ago(120), "succeeded")]),
        ("c", "t1", "failed", None, ago(5), None, [(ago(5), "failed")]),
        ("d", "t2", "completed", ago(5), None, None, [(ago(5), "no_listener")]),
        ("e", "t1", "cancelled", None, None, ago(6), [(ago(5), "succeeded")]),
        ("f", "t3", "active", None, None, None, [(ago(5), "failed")]),
    ]
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("SELECT audit_ensure_partitions($1::date)", created.date())
        for job_id, topic, status, completed, failed, cancelled, attempts in jobs:
            await conn.execute(
                "INSERT INTO schedule_audit (id, topic, status, attempts, "
                "created_at, updated_at, completed_at, failed_at, "
                "cancelled_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                job_id,
                topic,
                status,
                len(attempts),
                created,
                max(a[0] for a in attempts),
                completed,
                failed,
                cancelled,
            )
            for n, (finished, outcome) in enumerate(attempts, 1):
                await conn.execute(
                    "INSERT INTO schedule_attempts (job_id, attempt_no, started_at, "
                    "finished_at, outcome, job_created_at) VALUES ($1, $2, $3, $3, $4, $5)",
                    job_id,
                    n,
                    finished,
                    outcome,
                    created,
                )
    finally:
        await conn.close()

    assert await trail.finished_since(now - timedelta(hours=1)) == {"t1": (1, 1), "t2": (1, 0)}
    assert await trail.finished_since(now - timedelta(hours=3)) == {"t1": (2, 1), "t2": (1, 0)}
    assert await trail.finished_since(now) == {}
