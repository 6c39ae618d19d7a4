"""The worker: sleep until the earliest due job (or a wake-up), claim a batch,
run each attempt's listeners under its timeout while a heartbeat keeps the
lease, then settle in batches. Also recovers expired leases and prunes."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from opentelemetry.trace import INVALID_SPAN, Span, Status, StatusCode, Tracer

from listeners import (
    SCHEDULE_FAILED_TOPIC,
    Listener,
    call_listener,
    qualified_name,
    ListenerRegistry,
    ScheduleArrivedEvent,
    ScheduleFailedEvent,
    describe_error,
    dispatch,
)
from listeners.dispatch import DispatchResult
from scheduler.clock import Clock
from scheduler.config import CronSettings, RetentionSettings, WorkerSettings
from scheduler.job import ClaimedJob, Settlement
from scheduler.metrics import Metrics
from scheduler.retry import Backoff, RetryPolicy
from scheduler.scripts import ScriptCode
from scheduler.settler import Settler
from scheduler.store import RedisStore
from scheduler.wire import Subscription
from scheduler.ticker import fire_due_crons
from scheduler.tracing import (
    ATTEMPT_OUTCOME,
    EVENT_SCHEDULE_FAILED,
    JOB_ATTEMPT,
    JOB_ID,
    attempt_span,
    get_tracer,
    is_noop,
    listener_span,
)
from scheduler.timeutil import ms_to_utc

log = logging.getLogger("horae.worker")

# Safety net only: pub/sub is at-most-once, so an idle worker re-plans this often
# even if a wake-up message was lost. Due jobs are never timed by this.
IDLE_RECHECK_MS = 5_000

RETRY_SCHEDULED, FAILED_FOR_GOOD = 3, 4


def new_worker_id() -> str:
    """host:pid:random, unique per worker instance."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    """Runs due jobs of one namespace. Start with start(), stop with stop()."""

    def __init__(
        self,
        store: RedisStore,
        registry: ListenerRegistry,
        clock: Clock,
        settings: WorkerSettings,
        retention: RetentionSettings,
        metrics: Metrics,
        *,
        cron: CronSettings | None = None,
        tracer: Tracer | None = None,
        concurrency: int | None = None,
        topics: Sequence[str] | None = None,
        worker_id: str | None = None,
    ) -> None:
        self.store, self.registry, self.clock, self.settings = store, registry, clock, settings
        self.retention, self.metrics = retention, metrics
        self.cron = cron or CronSettings()
        self.tracer = tracer or get_tracer()
        self._next_cron: int | None = 0  # unknown until the first claim: check at once
        self.concurrency = concurrency or settings.concurrency
        self.topics = tuple(topics or ())
        self.id = worker_id or new_worker_id()
        self._leases: dict[str, str] = {}  # job id -> token, while listeners run
        self._running: dict[asyncio.Task[None], ClaimedJob] = {}
        self._wake = asyncio.Event()
        self._slot_free = asyncio.Event()
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._side_tasks: set[asyncio.Task[Any]] = set()
        self._settler = Settler(store, clock, retention.completed_count)
        self._started = False
        self._reserved = 0  # slots held for jobs this process is scheduling (reserve/adopt)
        self._subscription: Subscription | None = None
        # Composition-root hooks: the facade starts the audit relay and refreshes its gauges.
        self.on_start: Callable[[], Awaitable[None]] | None = None
        self.on_housekeeping: Callable[[], Awaitable[None]] | None = None

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Subscribe to wake-ups and start the loops."""
        if self.on_start is not None:
            await self.on_start()
        self._subscription = await self.store.subscribe_wake(self._wake.set)
        self._settler.start()
        self._started = True
        for name, loop in (
            ("claim", self._claim_loop),
            ("heartbeat", self._heartbeat_loop),
            ("housekeeping", self._housekeeping_loop),
        ):
            self._tasks.append(asyncio.create_task(loop(), name=f"horae-{name}"))
        log.info("worker started", extra={"event": "worker_started", "worker": self.id})

    async def stop(self, grace: float | None = None) -> None:
        """Stop claiming; let attempts finish up to `grace` s; release the rest uncounted."""
        grace = self.settings.grace_s if grace is None else grace
        self._stopping = True
        self._wake.set()
        self._slot_free.set()
        claim = self._tasks[0] if self._tasks else None
        if claim:
            await asyncio.gather(claim, return_exceptions=True)
        running = list(self._running)
        if running:
            await asyncio.wait(running, timeout=grace)
        unfinished = {t: j for t, j in self._running.items() if not t.done()}
        for task in unfinished:
            task.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)
        leases = [(j.id, self._leases.pop(j.id)) for j in unfinished.values() if j.id in self._leases]
        await self._settler.stop()
        if leases:
            released = await self.store.release(leases, self.clock.now_ms())
            log.info("released %d unfinished attempts", released, extra={"event": "worker_released"})
        for task in self._tasks[1:]:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._side_tasks:
            await asyncio.wait(self._side_tasks, timeout=5)
        if self._subscription is not None:
            await self._subscription.aclose()
        log.info("worker stopped", extra={"event": "worker_stopped", "worker": self.id})

    @property
    def active(self) -> int:
        """Attempts running now."""
        return len(self._running)

    # ------------------------------------------------------------------ claiming
    def reserve(self, topic: str) -> bool:
        """Hold a slot for a job of `topic` that this process is about to schedule for
        now, so that it can be leased to this worker in the same call (see adopt)."""
        if not self._started or self._stopping or (self.topics and topic not in self.topics):
            return False
        if len(self._running) + self._reserved >= self.concurrency:
            return False
        self._reserved += 1
        return True

    def adopt(self, job: ClaimedJob | None) -> None:
        """Run a job leased to this worker by the call that scheduled it (None: it was
        queued instead); ends the reservation either way."""
        self._reserved -= 1
        if job is not None and not self._stopping:
            self._start(job)
            return
        self._slot_free.set()  # the claim loop may be waiting for the slot this held
        if job is not None:  # stopped while the call was in flight: give it back, uncounted
            self._spawn(self._give_back(job))

    async def _give_back(self, job: ClaimedJob) -> None:
        await self.store.release([(job.id, job.token)], self.clock.now_ms())

    def _start(self, job: ClaimedJob) -> None:
        self._leases[job.id] = job.token
        task = asyncio.create_task(self._run(job), name=f"horae-attempt-{job.id}")
        self._running[task] = job
        self.metrics.active_attempts.add(1)

    async def _claim_loop(self) -> None:
        while not self._stopping:
            free = self.concurrency - len(self._running) - self._reserved
            if free <= 0:
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            self._wake.clear()
            limit = min(free, self.settings.claim_batch)
            try:
                if self._next_cron is not None and self._next_cron <= self.clock.now_ms():
                    await fire_due_crons(self.store, self.clock, self.cron, self.tracer)
                jobs, next_due, self._next_cron = await self.store.claim(
                    self.clock.now_ms(), limit, self.settings.lease_ms, self.id, self.topics
                )
            except Exception as exc:  # noqa: BLE001 - Redis blips must not kill the worker
                log.warning("claim failed: %s", exc, extra={"event": "claim_error"})
                await asyncio.sleep(0.5)
                continue
            for job in jobs:
                self._start(job)
            if len(jobs) == limit or self._stopping:
                continue
            now = self.clock.now_ms()
            deadline = min(t for t in (next_due, self._next_cron, now + IDLE_RECHECK_MS) if t is not None)
            await self.clock.sleep_until(deadline, self._wake)

    # ------------------------------------------------------------------- running
    async def _run(self, job: ClaimedJob) -> None:
        try:
            await self._attempt(job)
        finally:
            self._running.pop(asyncio.current_task(), None)  # type: ignore[arg-type]
            self.metrics.active_attempts.add(-1)
            self._slot_free.set()

    async def _attempt(self, job: ClaimedJob) -> None:
        lateness_ms = max(0, self.clock.now_ms() - job.due_ms)
        if is_noop(self.tracer):  # no SDK: a no-op span still costs ~a fifth of an attempt
            await self._attempt_in_span(job, INVALID_SPAN, lateness_ms)
            return
        with attempt_span(self.tracer, job.topic, job.trace, job.id, job.attempt, job.max_attempts,
                          lateness_ms) as span:
            await self._attempt_in_span(job, span, lateness_ms)

    async def _call_traced(self, fn: Listener, event: Any) -> None:
        with listener_span(self.tracer, qualified_name(fn)):
            await call_listener(fn, event)

    async def _attempt_in_span(self, job: ClaimedJob, span: Span, lateness_ms: int) -> None:
        attrs = {"topic": job.topic}
        started = time.monotonic()
        self.metrics.lateness.record(lateness_ms / 1000, attrs)
        listeners = self.registry.listeners(job.topic)
        event = ScheduleArrivedEvent(
            scheduled_job_id=job.id,
            topic=job.topic,
            payload=json.loads(job.payload_json),
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            run_at=ms_to_utc(job.run_at_ms),
            metadata=json.loads(job.metadata_json),
        )
        call = self._call_traced if span.is_recording() else call_listener
        result = await dispatch(listeners, event, job.timeout_ms / 1000, call)
        self._leases.pop(job.id, None)
        self.metrics.attempt_duration.record(time.monotonic() - started, attrs)
        if result.ok:
            outcome = "succeeded" if result.listeners else "no_listener"
            if not result.listeners:
                log.warning(
                    "no listener for topic %r; job %s completed", job.topic, job.id,
                    extra={"event": "no_listener", "job_id": job.id, "topic": job.topic},
                )
                self.metrics.no_listener.add(1, attrs)
            self.metrics.attempts.add(1, {**attrs, "outcome": outcome})
            span.set_attribute(ATTEMPT_OUTCOME, outcome)
            code = await self._settler.settle(Settlement(job.id, job.token, outcome), ok=True)
            if code == 1:
                self.metrics.completed.add(1, attrs)
            self._log_lost(job, code)
            return
        await self._settle_failure(job, result, event.metadata, span)

    async def _settle_failure(self, job: ClaimedJob, result: DispatchResult, metadata: Any, span: Span) -> None:
        outcome = "timed_out" if result.timed_out else "failed"
        error, exc = _error_record(job, result)
        span.set_attribute(ATTEMPT_OUTCOME, outcome)
        span.set_status(Status(StatusCode.ERROR, f"{error['type']}: {error['message']}"))
        policy = RetryPolicy(job.max_attempts, Backoff(job.backoff_type, job.backoff_delay_ms))  # type: ignore[arg-type]
        decision = policy.decide(job.attempt, exc)
        retry_at = -1 if decision is None else self.clock.now_ms() + decision.delay_ms
        error_json = json.dumps(error, separators=(",", ":"))
        self.metrics.attempts.add(1, {"topic": job.topic, "outcome": outcome})
        code = await self._settler.settle(
            Settlement(job.id, job.token, outcome, error_json=error_json, retry_at_ms=retry_at), ok=False
        )
        log.info(
            "attempt %d of job %s %s: %s", job.attempt, job.id, outcome, error["message"],
            extra={"event": "attempt_failed", "job_id": job.id, "topic": job.topic, "outcome": outcome},
        )
        if code == FAILED_FOR_GOOD:
            span.add_event(EVENT_SCHEDULE_FAILED, {JOB_ID: job.id, JOB_ATTEMPT: job.attempt,
                                                   "error.type": str(error["type"])})
        self._after_failure(job.id, job.topic, job.attempt, error, metadata, code)

    def _after_failure(self, job_id: str, topic: str, attempt: int, error: dict[str, Any], metadata: Any,
                       code: int) -> None:
        attrs = {"topic": topic}
        if code == RETRY_SCHEDULED:
            self.metrics.retries.add(1, attrs)
        elif code == FAILED_FOR_GOOD:
            self.metrics.failed.add(1, attrs)
            failed = ScheduleFailedEvent(job_id, topic, error, attempt, metadata)
            self._spawn(self._emit_failed(failed))
        elif code < 0:
            self._log_lost_code(job_id, code)

    def _log_lost(self, job: ClaimedJob, code: int) -> None:
        if code < 0:
            self._log_lost_code(job.id, code)

    def _log_lost_code(self, job_id: str, code: int) -> None:
        log.warning(
            "result for job %s ignored: %s", job_id, ScriptCode(code).name,
            extra={"event": "lease_lost", "job_id": job_id},
        )

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def _emit_failed(self, event: ScheduleFailedEvent) -> None:
        """schedule.failed, fire-and-forget: listener errors are logged, never raised."""
        listeners = self.registry.listeners(SCHEDULE_FAILED_TOPIC)
        result = await dispatch(listeners, event, self.settings.timeout_ms / 1000)
        for failure in result.failures:
            log.error(
                "schedule.failed listener %s raised: %r", failure.listener, failure.exception,
                extra={"event": "schedule_failed_listener_error", "job_id": event.scheduled_job_id},
            )

    # -------------------------------------------------------------- housekeeping
    async def _heartbeat_loop(self) -> None:
        interval = self.settings.lease_ms / 3000
        while True:
            await asyncio.sleep(interval)
            leases = list(self._leases.items())
            if not leases:
                continue
            try:
                lost = await self.store.extend_leases(leases, self.clock.now_ms(), self.settings.lease_ms)
            except Exception as exc:  # noqa: BLE001 - next beat tries again
                log.warning("heartbeat failed: %s", exc, extra={"event": "heartbeat_error"})
                continue
            if lost:
                log.warning("%d leases were lost to recovery", lost, extra={"event": "lease_lost"})

    async def _housekeeping_loop(self) -> None:
        last_prune = 0.0
        while True:
            await asyncio.sleep(self.settings.recover_interval_s)
            try:
                self.metrics.jobs_by_state = await self.store.stats()
                if self.on_housekeeping is not None:
                    await self.on_housekeeping()
                await self.recover_expired()
                if time.monotonic() - last_prune >= self.retention.prune_interval_s:
                    last_prune = time.monotonic()
                    await self.prune()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - try again next round
                log.warning("housekeeping failed: %s", exc, extra={"event": "housekeeping_error"})

    async def recover_expired(self) -> int:
        """Fail attempts whose lease expired (their worker died): 'worker lost'."""
        now = self.clock.now_ms()
        rows = await self.store.expired_leases(now)
        items, infos = [], []
        for row in rows:
            if not row.get("token"):
                continue
            attempt = int(row["attempts"])
            error = {
                "type": "WorkerLost",
                "message": f"worker {row.get('worker', '?')} lost its lease during attempt {attempt}",
                "traceback": "",
            }
            policy = RetryPolicy(int(row["max"]), Backoff(row["btype"], int(row["bdelay"])))  # type: ignore[arg-type]
            decision = policy.decide(attempt)
            retry_at = -1 if decision is None else now + decision.delay_ms
            items.append(Settlement(row["id"], row["token"], "worker_lost", json.dumps(error), retry_at, True))
            infos.append((row, attempt, error))
        if not items:
            return 0
        codes = await self.store.fail(items, now)
        recovered = 0
        for (row, attempt, error), code in zip(infos, codes):
            if code == ScriptCode.LEASE_ALIVE or code == ScriptCode.LEASE_LOST:
                continue
            recovered += 1
            self.metrics.attempts.add(1, {"topic": row["topic"], "outcome": "worker_lost"})
            log.warning(
                "job %s: attempt %d lost its worker", row["id"], attempt,
                extra={"event": "worker_lost", "job_id": row["id"]},
            )
            self._after_failure(row["id"], row["topic"], attempt, error, json.loads(row.get("meta", "{}")), code)
        return recovered

    async def prune(self) -> int:
        """Delete finished jobs past retention (loops while a batch comes back full)."""
        total = 0
        r = self.retention
        while True:
            n = await self.store.prune(
                self.clock.now_ms(), r.completed_age_s * 1000, r.failed_age_s * 1000, r.cancelled_age_s * 1000
            )
            total += n
            if n < 500:
                return total


def _error_record(job: ClaimedJob, result: DispatchResult) -> tuple[dict[str, Any], BaseException | None]:
    """The serialized last_error of a failed attempt and the exception behind it."""
    if result.timed_out:
        err = {
            "type": "TimeoutError",
            "message": f"attempt {job.attempt} timed out after {job.timeout_ms / 1000:g} s",
            "traceback": "",
        }
        return err, None
    first = result.failures[0]
    record: dict[str, Any] = {**describe_error(first.exception), "listener": first.listener}
    if len(result.failures) > 1:
        record["other_failures"] = [f"{f.listener}: {f.exception!r}" for f in result.failures[1:]]
    return record, first.exception

