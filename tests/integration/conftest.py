"""Fixtures of the audit integration tests: an outbox writer that XADDs events
exactly as the Lua scripts do (test_audit_outbox_helper.py proves it against the
real engine) with a controlled clock, a relay with small timeouts, and a
connection to the test's own database."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
import asyncpg
import pytest
import redis.asyncio as aioredis

from audit.options import RelayOptions
from audit.relay import AuditRelay
from scheduler.config import AuditSettings
from scheduler.keys import Keys
from scheduler.outbox import ErrorRecord, error_record

START_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z


def _json(value: object) -> str:
    """JSON text as the engine writes it into the outbox (compact)."""
    return json.dumps(value, separators=(",", ":"))


def _error(error_type: str, message: str, traceback: str, listener: str | None) -> ErrorRecord:
    error = error_record(error_type, message, traceback)
    if listener is not None:
        error["listener"] = listener
    return error


class Outbox:
    """Appends outbox events exactly as the Lua scripts do; `now` is the event clock (ms)."""

    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self.redis = redis
        self.key = Keys(namespace).outbox
        self.now = START_MS
        self.ids: list[str] = []

    def tick(self, ms: int = 1_000) -> int:
        self.now += ms
        return self.now

    async def add(self, kind: str, job_id: str, attempt: int, ts: int | None = None, **fields: object) -> str:
        entry: dict[str, str] = {"e": kind, "id": job_id, "ts": str(self.now if ts is None else ts),
                                 "a": str(attempt)}
        entry.update({k: str(v) for k, v in fields.items()})
        sid = await self.redis.xadd(self.key, entry)  # type: ignore[arg-type]
        text = sid.decode() if isinstance(sid, bytes) else str(sid)
        self.ids.append(text)
        return text

    async def scheduled(self, job_id: str, *, topic: str = "billing.charge", run_at: int | None = None,
                        due: int | None = None, max_attempts: int = 3, payload: object = None,
                        metadata: object = None, backoff: str = "exponential", delay: int = 1_000,
                        tz: str = "Europe/Paris", timeout_ms: int = 60_000, trace: str = "", cron: str = "") -> str:
        run = self.now + 1_000 if run_at is None else run_at
        return await self.add(
            "scheduled", job_id, 0, topic=topic, run_at=run, due=run if due is None else due, tz=tz,
            payload=_json({"invoice": job_id} if payload is None else payload),
            metadata=_json({"tenant": "acme"} if metadata is None else metadata),
            max_attempts=max_attempts, backoff_type=backoff, backoff_delay=delay, timeout_ms=timeout_ms,
            trace=trace, cron=cron,
        )

    async def started(self, job_id: str, attempt: int, due: int, worker: str = "w1",
                      topic: str = "billing.charge") -> str:
        return await self.add("attempt_started", job_id, attempt, worker=worker, due=due, topic=topic)

    async def attempt_failed(self, job_id: str, attempt: int, *, outcome: str = "failed",
                             error_type: str = "ValueError", message: str = "boom", worker: str = "w1",
                             duration: int = 20, traceback: str = "Traceback ...", listener: str | None = None) -> str:
        error = _json(_error(error_type, message, traceback, listener))
        return await self.add("attempt_failed", job_id, attempt, worker=worker, outcome=outcome, error=error,
                              duration_ms=duration)

    async def retry_scheduled(self, job_id: str, attempt: int, next_at: int) -> str:
        return await self.add("retry_scheduled", job_id, attempt, next_at=next_at)

    async def completed(self, job_id: str, attempt: int, *, outcome: str = "succeeded", worker: str = "w1",
                        duration: int = 15) -> str:
        return await self.add("completed", job_id, attempt, worker=worker, outcome=outcome, duration_ms=duration)

    async def attempt_succeeded(self, job_id: str, attempt: int, *, worker: str = "w1", duration: int = 15) -> str:
        return await self.add("attempt_succeeded", job_id, attempt, worker=worker, outcome="succeeded",
                              duration_ms=duration)

    async def failed(self, job_id: str, attempt: int, *, error_type: str = "ValueError",
                     message: str = "boom", traceback: str = "Traceback ...", listener: str | None = None) -> str:
        return await self.add("failed", job_id, attempt, error=_json(_error(error_type, message, traceback, listener)))

    async def schedule_failed(self, job_id: str, attempt: int, topic: str = "billing.charge", *,
                              last_error: Mapping[str, object] | None = None, metadata: object = None) -> str:
        payload = {"scheduledJobId": job_id, "topic": topic,
                   "lastError": {"type": "ValueError"} if last_error is None else last_error,
                   "attempts": attempt, "metadata": {"tenant": "acme"} if metadata is None else metadata}
        return await self.add("schedule.failed", job_id, attempt, payload=_json(payload))

    async def cancelled(self, job_id: str, attempt: int, running: bool) -> str:
        return await self.add("cancelled", job_id, attempt, running=1 if running else 0)

    async def released(self, job_id: str, attempt: int, worker: str = "w1") -> str:
        return await self.add("attempt_released", job_id, attempt, worker=worker)


@pytest.fixture
def outbox(redis: aioredis.Redis, namespace: str) -> Outbox:
    return Outbox(redis, namespace)


@pytest.fixture
def relay_options() -> RelayOptions:
    """Small timeouts so claims, retries and drains happen within a test."""
    # claim_idle_ms leaves room for a loaded 2-core machine between a read and the "not idle yet" check.
    return RelayOptions.from_settings(AuditSettings(), block_ms=50, claim_idle_ms=800, retry_initial_s=0.02,
                                      retry_max_s=0.2, trim_interval_s=0.1, trim_approximate=False,
                                      drain_timeout_s=5.0, connect_timeout_s=2.0, command_timeout_s=10.0)


@pytest.fixture
async def relay(redis: aioredis.Redis, namespace: str, database_url: str,
                relay_options: RelayOptions) -> AsyncIterator[AuditRelay]:
    relay = AuditRelay(redis, namespace, database_url, relay_options)
    yield relay
    await relay.stop()


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url)
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    yield conn
    await conn.close()


async def _drain(relay: AuditRelay) -> int:
    total = 0
    while n := await relay.step():
        total += n
    return total


@pytest.fixture
def drain() -> Callable[[AuditRelay], Awaitable[int]]:
    """`await drain(relay)`: the relay's own loop step (read, commit, ack, trim) until a
    step finds nothing within block_ms; returns the entries settled. The relay must not be started."""
    return _drain
