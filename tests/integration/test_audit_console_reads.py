"""The audit reads the console's pages make (audit/reader.py), on a real PostgreSQL: the
operator action log of one target and of all, newest first and bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from audit.options import RelayOptions
from audit.reader import AuditTrail
from scheduler.config import load_settings


@pytest.fixture
async def trail(redis_url: str, namespace: str, database_url: str) -> AsyncIterator[AuditTrail]:
    client = aioredis.from_url(redis_url)
    audit = AuditTrail(client, namespace, database_url, RelayOptions.from_settings(load_settings(env={}).audit))
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
        ("job-a", "act4", {"n": 4}), ("job-a", "act2", {"n": 2}), ("job-a", "act0", {"n": 0})]
    assert [a.action for a in await trail.actions("job-a", 2)] == ["act4", "act2"]
    assert await trail.actions("job-none") == []
    assert [a.action for a in await trail.actions()] == ["act4", "act3", "act2", "act1", "act0"]
    assert [a.target for a in await trail.actions(None, 2)] == ["job-a", "cron:nightly"]
