"""The audit tests' outbox writer (conftest.Outbox) writes exactly what the Lua
scripts write: the real engine produces every event type, then the helper is
given the same values and its entries must be field-for-field the same."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler.core.flow import Dedupe
from scheduler.core.keys import Keys
from scheduler.core.outbox import EVENT_TYPES
from scheduler.core.retry import Backoff, RetryPolicy
from scheduler.core.timeutil import ms_to_utc
from scheduler.testing.clocks import FakeClock
from tests.audit_outbox import Outbox
from tests.integration.engine_fixtures import START_MS, eventually, make_scheduler

Fields = dict[str, str]


def _error(fields: Fields, name: str = "error") -> dict[str, Any]:
    error = json.loads(fields[name])
    return {
        "error_type": error["type"],
        "message": error["message"],
        "traceback": error["traceback"],
        "listener": error.get("listener"),
    }


async def _scheduled(ob: Outbox, f: Fields) -> str:
    return await ob.scheduled(
        f["id"],
        topic=f["topic"],
        run_at=int(f["run_at"]),
        due=int(f["due"]),
        max_attempts=int(f["max_attempts"]),
        payload=json.loads(f["payload"]),
        metadata=json.loads(f["metadata"]),
        backoff=f["backoff_type"],
        delay=int(f["backoff_delay"]),
        tz=f["tz"],
        timeout_ms=int(f["timeout_ms"]),
        trace=f["trace"],
        cron=f["cron"],
    )


async def _started(ob: Outbox, f: Fields) -> str:
    return await ob.started(
        f["id"], int(f["a"]), int(f["due"]), worker=f["worker"], topic=f["topic"]
    )


async def _attempt_failed(ob: Outbox, f: Fields) -> str:
    return await ob.attempt_failed(
        f["id"],
        int(f["a"]),
        outcome=f["outcome"],
        worker=f["worker"],
        duration=int(f["duration_ms"]),
        finished=int(f["finished"]),
        **_error(f),
    )


async def _retry_scheduled(ob: Outbox, f: Fields) -> str:
    return await ob.retry_scheduled(f["id"], int(f["a"]), int(f["next_at"]))


async def _completed(ob: Outbox, f: Fields) -> str:
    return await ob.completed(
        f["id"],
        int(f["a"]),
        outcome=f["outcome"],
        worker=f["worker"],
        duration=int(f["duration_ms"]),
        finished=int(f["finished"]),
    )


async def _attempt_succeeded(ob: Outbox, f: Fields) -> str:
    return await ob.attempt_succeeded(
        f["id"],
        int(f["a"]),
        worker=f["worker"],
        duration=int(f["duration_ms"]),
        finished=int(f["finished"]),
    )


async def _failed(ob: Outbox, f: Fields) -> str:
    return await ob.failed(f["id"], int(f["a"]), finished=int(f["finished"]), **_error(f))


async def _schedule_failed(ob: Outbox, f: Fields) -> str:
    return await ob.schedule_failed(f["id"], int(f["a"]))


async def _cancelled(ob: Outbox, f: Fields) -> str:
    return await ob.cancelled(
        f["id"], int(f["a"]), running=f["running"] == "1", actor=f.get("actor")
    )


async def _retried(ob: Outbox, f: Fields) -> str:
    return await ob.retried(
        f["id"], int(f["a"]), from_state=f["from"], due=int(f["due"]), actor=f["actor"]
    )


async def _rescheduled(ob: Outbox, f: Fields) -> str:
    return await ob.rescheduled(
        f["id"], int(f["a"]), int(f["run_at"]), due=int(f["due"]), tz=f["tz"], actor=f["actor"]
    )


async def _deleted(ob: Outbox, f: Fields) -> str:
    return await ob.deleted(f["id"], int(f["a"]), from_state=f["from"], actor=f["actor"])


async def _released(ob: Outbox, f: Fields) -> str:
    return await ob.released(f["id"], int(f["a"]), worker=f["worker"])


async def _deduplicated(ob: Outbox, f: Fields) -> str:
    return await ob.deduplicated(f["id"], reason=f["reason"], dropped=f["dropped"])


async def _debounced(ob: Outbox, f: Fields) -> str:
    return await ob.debounced(
        f["id"],
        int(f["run_at"]),
        due=int(f["due"]),
        payload=json.loads(f["payload"]),
        dropped=f["dropped"],
    )


WRITERS: dict[str, Callable[[Outbox, Fields], Awaitable[str]]] = {
    "scheduled": _scheduled,
    "attempt_started": _started,
    "attempt_failed": _attempt_failed,
    "retry_scheduled": _retry_scheduled,
    "completed": _completed,
    "attempt_succeeded": _attempt_succeeded,
    "failed": _failed,
    "schedule.failed": _schedule_failed,
    "cancelled": _cancelled,
    "attempt_released": _released,
    "retried": _retried,
    "rescheduled": _rescheduled,
    "deleted": _deleted,
    "deduplicated": _deduplicated,
    "debounced": _debounced,
}


async def _entries(redis: aioredis.Redis, key: str) -> list[Fields]:
    return [{k.decode(): v.decode() for k, v in raw.items()} for _, raw in await redis.xrange(key)]


async def test_the_helper_writes_what_the_scripts_write(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, clock = ListenerRegistry(), FakeClock(START_MS)
    cancel_gate, never = asyncio.Event(), asyncio.Event()

    @reg.on_event("fail")
    async def fail(event: ScheduleArrivedEvent) -> None:
        raise ValueError(f"boom {event.attempt}")

    @reg.on_event("ok")
    async def ok(event: ScheduleArrivedEvent) -> None:
        pass

    @reg.on_event("slow")
    async def slow(event: ScheduleArrivedEvent) -> None:
        await cancel_gate.wait()

    @reg.on_event("hold")
    async def hold(event: ScheduleArrivedEvent) -> None:
        await never.wait()  # given back by the worker's stop

    key = Keys(namespace).outbox

    async def count(kind: str) -> int:
        return sum(1 for f in await _entries(redis, key) if f["e"] == kind)

    async def has(kind: str, n: int = 1) -> bool:
        return await count(kind) >= n

    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        ids = {
            topic: await s.schedule_in(
                topic,
                0,
                payload={"n": [1, 2.5], "s": "é"},
                metadata={"tenant": "t"},
                tz="Europe/Paris",
                retry=RetryPolicy(2, Backoff("fixed", 1_000)),
            )
            for topic in ("fail", "ok", "nobody", "slow", "hold")
        }
        later = await s.schedule_in("ok", "1h", payload=[1], metadata={"k": "v"})
        async with s.worker(grace=0.05):
            await eventually(lambda: has("attempt_started", 5), what="five attempts started")
            clock.advance(1)
            await eventually(lambda: has("schedule.failed"), what="the terminal failure")
            assert await s.cancel(ids["slow"]) and await s.cancel(later)
            cancel_gate.set()
            await eventually(
                lambda: has("attempt_succeeded"), what="the cancelled job's attempt finishing"
            )
        await eventually(lambda: has("attempt_released"), what="the held attempt given back")
        # The job operations, with no worker left to claim the retried job.
        assert await s.retry(later, actor="ops")
        assert await s.reschedule(later, ms_to_utc(START_MS + 7_200_000), "Asia/Tokyo")
        assert await s.delete(later)
        # Flow control: a throttled call and a debounced one, recorded on the job they fold into.
        first = await s.schedule_in("ok", "1h", payload=[0], dedupe=Dedupe("once"))
        assert await s.schedule_in("ok", "1h", payload=[0], dedupe=Dedupe("once")) == first
        waiting = await s.schedule_in(
            "ok", "1h", payload=[1], dedupe=Dedupe("last", window="1m", mode="debounce")
        )
        assert (
            await s.schedule_in(
                "ok", "2h", payload=[2], dedupe=Dedupe("last", window="1m", mode="debounce")
            )
            == waiting
        )

    written = await _entries(redis, key)
    assert {f["e"] for f in written} == EVENT_TYPES
    helper = Outbox(redis, namespace)
    helper.key = f"{key}:helper"  # under the test's namespace: cleaned up with it
    for fields in written:
        helper.now = int(fields["ts"])
        await WRITERS[fields["e"]](helper, fields)
    assert await _entries(redis, helper.key) == written
