"""Payload schemas on real Redis and PostgreSQL: a payload refused where it is
scheduled writes nothing; one a worker refuses ends the job `completed` with one
attempt of outcome invalid_payload (Redis, audit rows, WARN, metric) and no
listener run; a valid one reaches the listener as the model instance."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import redis.asyncio as aioredis
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from pydantic import BaseModel

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import InvalidPayload, JobState
from scheduler.core.keys import Keys
from scheduler.observe.metrics import Metrics
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import (
    START_MS,
    audited_scheduler,
    eventually,
    in_state,
    make_scheduler,
)


class EmailPayload(BaseModel):
    to: str
    subject: str = ""


def email_registry(seen: list[Any]) -> ListenerRegistry:
    reg = ListenerRegistry()

    @reg.on_event("email.send", schema=EmailPayload)
    async def send(event: ScheduleArrivedEvent) -> None:
        seen.append(event.payload)

    return reg


async def keyspace(redis: aioredis.Redis, namespace: str) -> list[bytes]:
    return sorted([k async for k in redis.scan_iter(match="{" + namespace + "}:*")])


async def test_a_payload_refused_at_scheduling_writes_nothing(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    async with make_scheduler(redis_url, namespace, email_registry([])) as s:
        before = await keyspace(redis, namespace)
        with pytest.raises(InvalidPayload) as info:
            await s.schedule_in("email.send", "1m", payload={"to": 42})
        assert info.value.field == "payload"
        assert "payload.to: Input should be a valid string (got 42)" in str(info.value)
        with pytest.raises(InvalidPayload, match=r"payload\.to: Field required"):
            await s.schedule_cron(
                "mail", "0 * * * *", topic="email.send", payload={"subject": "hi"}
            )
        assert await keyspace(redis, namespace) == before
        assert set((await s.stats()).values()) == {0} and await s.list_crons() == []
        assert await s.schedule_in("other.topic", "1m", payload={"to": 42}), (
            "no schema: not checked"
        )


async def test_a_payload_the_worker_refuses_completes_as_invalid_payload(
    redis_url: str,
    database_url: str,
    namespace: str,
    redis: aioredis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, seen = FakeClock(START_MS), []
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    # The producer does not know the schema, so the bad payload is stored.
    async with audited_scheduler(
        redis_url, database_url, namespace, ListenerRegistry(), clock
    ) as producer:
        bad = await producer.schedule_in(
            "email.send", 0, payload={"subject": "no recipient"}, retry={"attempts": 5}
        )
        good = await producer.schedule_in("email.send", 0, payload={"to": "a@example.com"})
    s = audited_scheduler(redis_url, database_url, namespace, email_registry(seen), clock)
    s.metrics = Metrics(provider.get_meter("test"))
    async with s:
        with caplog.at_level(logging.WARNING, logger="horae.worker"):
            async with s.worker():
                for job_id in (bad, good):
                    await eventually(
                        lambda: in_state(s, job_id, JobState.COMPLETED), what="completed"
                    )
        info = await s.get_job(bad)
        assert info is not None and (info.state, info.attempts, info.outcome) == (
            JobState.COMPLETED,
            1,
            "invalid_payload",
        )
        assert info.last_error is not None and info.last_error["type"] == "ValidationError"
        assert info.last_error["message"] == "payload.to: Field required"
        ok = await s.get_job(good)
        assert ok is not None and ok.outcome is None and ok.last_error is None
        keys = Keys(namespace)
        assert not await redis.hexists(keys.job(good), "outcome"), (
            "the default outcome costs no field"
        )
        await s.audit.flush(timeout=10)
        row, attempts = await s.audit.get(bad), await s.audit.attempts(bad)
        good_attempts = await s.audit.attempts(good)

    assert seen == [EmailPayload(to="a@example.com")], (
        "the listener ran once, for the valid job, with the model"
    )
    assert row is not None and (row.status, row.attempts) == ("completed", 1)
    assert [(a.attempt_no, a.outcome, a.error_type, a.error_message) for a in attempts] == [
        (1, "invalid_payload", "ValidationError", "payload.to: Field required")
    ]
    assert [(a.outcome, a.error_type) for a in good_attempts] == [("succeeded", None)]
    warnings = [r for r in caplog.records if getattr(r, "event", None) == "invalid_payload"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert getattr(warnings[0], "job_id") == bad and getattr(warnings[0], "topic") == "email.send"
    assert "payload.to: Field required" in warnings[0].getMessage()
    points = {
        (m.name, tuple(sorted(p.attributes.items()))): p.value
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        for p in m.data.data_points
        if m.name in ("horae_jobs_invalid_payload_total", "horae_attempts_total")
    }
    assert points[("horae_jobs_invalid_payload_total", (("topic", "email.send"),))] == 1
    assert (
        points[("horae_attempts_total", (("outcome", "invalid_payload"), ("topic", "email.send")))]
        == 1
    )
    provider.shutdown()
