"""The audit tests' outbox writer: XADDs events exactly as the Lua scripts do
(tests/integration/test_audit_outbox_helper.py proves it against the real
engine), with a controlled clock."""

from __future__ import annotations

import json

import redis.asyncio as aioredis

from scheduler.core.keys import Keys
from scheduler.core.outbox import ErrorRecord, error_record

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

    async def add(
        self, kind: str, job_id: str, attempt: int, ts: int | None = None, **fields: object
    ) -> str:
        entry: dict[str, str] = {
            "e": kind,
            "id": job_id,
            "ts": str(self.now if ts is None else ts),
            "a": str(attempt),
        }
        entry.update({k: str(v) for k, v in fields.items()})
        sid = await self.redis.xadd(self.key, entry)  # type: ignore[arg-type]
        text = sid.decode() if isinstance(sid, bytes) else str(sid)
        self.ids.append(text)
        return text

    async def scheduled(
        self,
        job_id: str,
        *,
        topic: str = "billing.charge",
        run_at: int | None = None,
        due: int | None = None,
        max_attempts: int = 3,
        payload: object = None,
        metadata: object = None,
        backoff: str = "exponential",
        delay: int = 1_000,
        tz: str = "Europe/Paris",
        timeout_ms: int = 60_000,
        trace: str = "",
        cron: str = "",
    ) -> str:
        run = self.now + 1_000 if run_at is None else run_at
        return await self.add(
            "scheduled",
            job_id,
            0,
            topic=topic,
            run_at=run,
            due=run if due is None else due,
            tz=tz,
            payload=_json({"invoice": job_id} if payload is None else payload),
            metadata=_json({"tenant": "acme"} if metadata is None else metadata),
            max_attempts=max_attempts,
            backoff_type=backoff,
            backoff_delay=delay,
            timeout_ms=timeout_ms,
            trace=trace,
            cron=cron,
        )

    async def started(
        self, job_id: str, attempt: int, due: int, worker: str = "w1", topic: str = "billing.charge"
    ) -> str:
        return await self.add(
            "attempt_started", job_id, attempt, worker=worker, due=due, topic=topic
        )

    async def attempt_failed(
        self,
        job_id: str,
        attempt: int,
        *,
        outcome: str = "failed",
        error_type: str = "ValueError",
        message: str = "boom",
        worker: str = "w1",
        duration: int = 20,
        traceback: str = "Traceback ...",
        listener: str | None = None,
        finished: int | None = None,
    ) -> str:
        error = _json(_error(error_type, message, traceback, listener))
        return await self.add(
            "attempt_failed",
            job_id,
            attempt,
            worker=worker,
            outcome=outcome,
            error=error,
            duration_ms=duration,
            finished=self._end(finished),
        )

    async def retry_scheduled(self, job_id: str, attempt: int, next_at: int) -> str:
        return await self.add("retry_scheduled", job_id, attempt, next_at=next_at)

    async def completed(
        self,
        job_id: str,
        attempt: int,
        *,
        outcome: str = "succeeded",
        worker: str = "w1",
        duration: int = 15,
        finished: int | None = None,
        result: str | None = None,
    ) -> str:
        return await self.add(
            "completed",
            job_id,
            attempt,
            worker=worker,
            outcome=outcome,
            duration_ms=duration,
            finished=self._end(finished),
            **({} if result is None else {"result": result}),
        )

    async def attempt_succeeded(
        self,
        job_id: str,
        attempt: int,
        *,
        worker: str = "w1",
        duration: int = 15,
        finished: int | None = None,
        result: str | None = None,
    ) -> str:
        return await self.add(
            "attempt_succeeded",
            job_id,
            attempt,
            worker=worker,
            outcome="succeeded",
            duration_ms=duration,
            finished=self._end(finished),
            **({} if result is None else {"result": result}),
        )

    async def failed(
        self,
        job_id: str,
        attempt: int,
        *,
        error_type: str = "ValueError",
        message: str = "boom",
        traceback: str = "Traceback ...",
        listener: str | None = None,
        finished: int | None = None,
    ) -> str:
        return await self.add(
            "failed",
            job_id,
            attempt,
            error=_json(_error(error_type, message, traceback, listener)),
            finished=self._end(finished),
        )

    def _end(self, finished: int | None) -> int:
        """An attempt's end as the scripts record it: settled when it ended (now) unless given."""
        return self.now if finished is None else finished

    async def schedule_failed(self, job_id: str, attempt: int) -> str:
        return await self.add("schedule.failed", job_id, attempt)

    async def cancelled(
        self, job_id: str, attempt: int, running: bool, actor: str | None = None
    ) -> str:
        if actor is None:
            return await self.add("cancelled", job_id, attempt, running=1 if running else 0)
        return await self.add(
            "cancelled", job_id, attempt, running=1 if running else 0, actor=actor
        )

    async def retried(
        self,
        job_id: str,
        attempt: int,
        *,
        from_state: str = "failed",
        due: int | None = None,
        actor: str = "ops@host",
    ) -> str:
        return await self.add(
            "retried",
            job_id,
            attempt,
            **{"from": from_state},
            due=self.now if due is None else due,
            actor=actor,
        )

    async def rescheduled(
        self,
        job_id: str,
        attempt: int,
        run_at: int,
        *,
        due: int | None = None,
        tz: str = "UTC",
        actor: str = "ops@host",
    ) -> str:
        return await self.add(
            "rescheduled",
            job_id,
            attempt,
            run_at=run_at,
            due=run_at if due is None else due,
            tz=tz,
            actor=actor,
        )

    async def deleted(
        self, job_id: str, attempt: int, *, from_state: str = "scheduled", actor: str = "ops@host"
    ) -> str:
        return await self.add("deleted", job_id, attempt, **{"from": from_state}, actor=actor)

    async def released(self, job_id: str, attempt: int, worker: str = "w1") -> str:
        return await self.add("attempt_released", job_id, attempt, worker=worker)

    async def deduplicated(
        self, job_id: str, *, reason: str = "throttle", dropped: str = "later"
    ) -> str:
        return await self.add("deduplicated", job_id, 0, reason=reason, dropped=dropped)

    async def debounced(
        self,
        job_id: str,
        run_at: int,
        *,
        due: int | None = None,
        payload: object = None,
        dropped: str = "later",
    ) -> str:
        return await self.add(
            "debounced",
            job_id,
            0,
            run_at=run_at,
            due=run_at if due is None else due,
            payload=_json(payload),
            dropped=dropped,
        )
