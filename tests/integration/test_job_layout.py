"""How a job is laid out in Redis: one compact hash per job (payload chunks
inside it, a separate key only for big payloads); every form reads back the same."""

from __future__ import annotations

import asyncio
import json

import pytest
import redis.asyncio as aioredis

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import Backoff, JobState, RetryPolicy
from scheduler.core.job import NewJob
from scheduler.core.keys import Keys
from scheduler.core.timeutil import ms_to_utc
from tests.integration.engine_fixtures import eventually, make_scheduler


def payload_of(json_len: int) -> str:
    """A JSON string value whose JSON text is exactly `json_len` bytes."""
    return "x" * (json_len - 2)


@pytest.mark.parametrize("json_len", [3, 64, 65, 128, 129, 512, 513, 5000])
async def test_payload_round_trips_through_get_job_and_the_listener(
    redis_url: str, namespace: str, redis: aioredis.Redis, json_len: int
) -> None:
    reg, seen = ListenerRegistry(), []

    @reg.on_event("t")
    async def listener(event: ScheduleArrivedEvent) -> None:
        seen.append(event.payload)

    keys = Keys(namespace)
    async with make_scheduler(redis_url, namespace, reg) as s:
        job_id = await s.schedule_in("t", "1h", payload=payload_of(json_len))
        info = await s.get_job(job_id)
        assert info is not None and info.payload == payload_of(json_len)
        inline = json_len <= 512
        assert await redis.exists(keys.payload(job_id)) == (0 if inline else 1)
        # listpack on Redis 7, ziplist on 6.2: compact either way, not a hashtable
        assert await redis.object("encoding", keys.job(job_id)) in (b"listpack", b"ziplist")
        await s.cancel(job_id)

        now_id = await s.schedule_in("t", 0, payload=payload_of(json_len))
        async with s.worker():
            await eventually(lambda: _completed(s, now_id), what="completed")
        assert seen == [payload_of(json_len)]


async def test_chunks_are_joined_as_bytes_so_a_split_character_survives(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    """Our JSON is ASCII, but the store must not depend on it: 'é' is 2 bytes and
    after the opening quote one straddles the 64-byte chunk boundary."""
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        now = s.clock.now_ms()
        text = json.dumps("é" * 40, ensure_ascii=False)
        assert text.encode()[63:65] == "é".encode()
        job = NewJob(
            id="accents",
            topic="t",
            due_ms=now,
            run_at_ms=now,
            tz="UTC",
            payload_json=text,
            metadata_json="{}",
            max_attempts=5,
            backoff_type="exponential",
            backoff_delay_ms=30_000,
            backoff_max_delay_ms=3_600_000,
            backoff_jitter="none",
            timeout_ms=60_000,
        )
        assert await s.store.enqueue(job, now)
        info = await s.get_job("accents")
        assert info is not None and info.payload == "é" * 40
        claimed, _, _ = await s.store.claim(s.clock.now_ms() + 10, 10, 30_000, "w")
        assert [c.payload_json for c in claimed] == [text]


async def test_a_delayed_job_is_one_key_plus_its_due_entry(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        await s.schedule_in("t", "1h", payload={"i": 1, "pad": "x" * 80})
        names = sorted([k async for k in redis.scan_iter(match="{" + namespace + "}:*")])
        assert [n.split(b":")[1] for n in names] == [b"counts", b"due", b"j", b"outbox"]


async def _completed(s: object, job_id: str) -> bool:
    info = await s.get_job(job_id)  # type: ignore[attr-defined]
    await asyncio.sleep(0)
    return info is not None and info.state is JobState.COMPLETED


async def test_fields_holding_their_default_are_not_stored_but_read_back(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    keys = Keys(namespace)
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        plain = await s.schedule_in("t", "1h")
        stored = set((await redis.hgetall(keys.job(plain))).keys())
        assert stored == {b"topic", b"state", b"run_at", b"timeout", b"created", b"p1"}
        info = await s.get_job(plain)
        assert info is not None
        assert (info.attempts, info.max_attempts, info.backoff_type, info.backoff_delay_ms) == (
            0,
            5,
            "exponential",
            30_000,
        )
        assert (info.metadata, info.tz, info.cron, info.next_attempt_at) == (
            {},
            "UTC",
            None,
            info.run_at,
        )

        past = s.clock.now_ms() - 86_400_000
        custom = await s.schedule_at(
            "t",
            ms_to_utc(past),
            tz="Europe/Paris",
            metadata={"k": "v"},
            retry=RetryPolicy(3, Backoff("fixed", 5_000)),
        )
        info = await s.get_job(custom)
        assert info is not None
        assert (
            info.max_attempts,
            info.backoff_type,
            info.backoff_delay_ms,
            info.metadata,
            info.tz,
        ) == (3, "fixed", 5_000, {"k": "v"}, "Europe/Paris")
        assert info.run_at == ms_to_utc(past) and info.next_attempt_at == ms_to_utc(
            s.clock.now_ms()
        )

        claimed, _, _ = await s.store.claim(s.clock.now_ms(), 10, 30_000, "w")
        by_id = {c.id: c for c in claimed}
        assert (
            by_id[custom].max_attempts,
            by_id[custom].backoff_type,
            by_id[custom].metadata_json,
            by_id[custom].due_ms,
            by_id[custom].run_at_ms,
        ) == (3, "fixed", '{"k":"v"}', s.clock.now_ms(), past)
        assert plain not in by_id
