"""The worker: its lifecycle and claim loop (sleep until the earliest due job or a
wake-up, claim a batch), the local handoff of jobs its own process schedules
(enqueue_local), and the running of each attempt in its span with its metrics,
settled in batches. Attempts: scheduler/worker/attempt.py; leases and pruning:
scheduler/worker/housekeeping.py."""

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

from listeners import Listener, ListenerRegistry, ScheduleFailedEvent, dispatch, qualified_name
from scheduler.core.clock import Clock
from scheduler.core.config import CronSettings, RetentionSettings, WorkerSettings
from scheduler.core.errors import ConfigError
from scheduler.core.job import ClaimedJob, NewJob, Settlement
from scheduler.core.outbox import SCHEDULE_FAILED, SCHEDULE_FAILED_TOPIC, ErrorRecord
from scheduler.core.results import MAX_RESULT_BYTES
from scheduler.observe.metrics import Metrics
from scheduler.observe.tracing import (
    ATTEMPT_OUTCOME,
    JOB_ATTEMPT,
    JOB_ID,
    attempt_span,
    get_tracer,
    is_noop,
    listener_span,
)
from scheduler.store.bulk import Enqueued
from scheduler.store.redis import RedisStore
from scheduler.store.scripts import ScriptCode, SettleCode, SettleReply
from scheduler.store.wire import Subscription
from scheduler.worker.advertise import ClaimFilter, entry_json, listener_app
from scheduler.worker.attempt import AttemptReporter, run_attempt
from scheduler.worker.housekeeping import Housekeeping
from scheduler.worker.outcomes import (
    log_lost,
    note_attempt_failed,
    note_completed,
    note_failure,
    note_success,
)
from scheduler.worker.pacer import Pacer
from scheduler.worker.process_pool import ProcessPool
from scheduler.worker.settler import Settler
from scheduler.worker.ticker import fire_due_crons

log = logging.getLogger("horae.worker")

# Safety net only: pub/sub is at-most-once, so an idle worker re-plans this often
# even if a wake-up message was lost. Due jobs are never timed by this.
IDLE_RECHECK_MS = 5_000


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
        all_topics: bool = False,
        worker_id: str | None = None,
        shared: Any = None,
        grace: float | None = None,
        result_bytes: int = MAX_RESULT_BYTES,
    ) -> None:
        """Args (beyond the parts): `topics`: exactly these (None: the topics `registry` has
        listeners for, plus topics no live worker serves); `all_topics`: every topic; `shared`: the
        slots of a PartitionedWorker's loops (worker_partitioned.SharedSlots) instead of its own;
        `grace`: seconds its attempts may finish when it stops (None: settings.grace_s);
        `result_bytes`: the largest result a job keeps ([limits] result_bytes).

        Raises:
            ConfigError: both `topics` and `all_topics`.
        """
        self.store, self.registry, self.clock, self.settings = store, registry, clock, settings
        self.retention, self.metrics = retention, metrics
        self.cron = cron or CronSettings()
        self.tracer = tracer or get_tracer()
        self._next_cron: int | None = 0  # unknown until the first claim: check at once
        # When the claim loop next has work as its last claim saw it (the earliest due job or
        # cron tick; None: nothing waits): read by the test clock
        # (scheduler/testing/time_machine.py) to step time.
        self.next_due_ms: int | None = None
        self.concurrency = concurrency or settings.concurrency
        self.topics = tuple(topics or ())  # explicit ones; the filter is fixed at start()
        self.all_topics = all_topics
        self._filter = ClaimFilter.of(registry.topics(), topics, all_topics)
        self.id = worker_id or new_worker_id()
        self._leases: dict[str, str] = {}  # job id -> token, while listeners run
        self._running: dict[asyncio.Task[None], ClaimedJob] = {}
        self._wake = asyncio.Event()
        self._slot_free = asyncio.Event()
        self._stopping = False
        self.grace = grace
        self.result_bytes = result_bytes
        self._stop_task: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._side_tasks: set[asyncio.Task[Any]] = set()
        self._settler = Settler(
            store,
            clock,
            retention.completed_count,
            self.settings.lease_ms / 1000,
            window_s=settings.batch_window_ms / 1000,
            hurry=lambda: self._free() <= 0,
        )
        self._claims = Pacer(settings.batch_window_ms / 1000)
        self.pool = ProcessPool(
            registry, settings
        )  # executor="process" listeners; no child until one runs
        self._started = False
        self._reserved = (
            0  # slots held for jobs this process is scheduling (see enqueue_local) or claiming
        )
        self.shared = shared
        if shared is not None:
            shared.join(self)
        self._unsure = False  # a claim's reply was lost: Redis may hold leases of ours we never saw
        self._subscription: Subscription | None = None
        self._housekeeping = Housekeeping(
            store,
            clock,
            settings=settings,
            retention=retention,
            metrics=metrics,
            leases=self._leases,
            on_failure=self._after_failure,
            advertise=self._advertise,
        )
        # Composition-root hooks: the facade starts the audit relay and refreshes its gauges,
        # and keeps the schedules declared beside the listeners of the topics served
        # (declared_crons.py).
        self.on_declare: Callable[[Sequence[str]], Awaitable[object]] | None = None
        self.on_start: Callable[[], Awaitable[None]] | None = None
        self.on_housekeeping: Callable[[], Awaitable[None]] | None = None
        # Called once when an operator's drain request arrives (horae workers drain), before the
        # worker stops itself: `horae worker` turns unready and leaves as on SIGTERM.
        self.on_drain: Callable[[str], None] | None = None

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Store the schedules declared beside the listeners it serves, advertise in the worker
        registry, subscribe to wake-ups and start the loops.

        Raises:
            ConfigError: no listener, no explicit topics and not all_topics (it would only
                complete other workers' jobs as no_listener); a declared schedule refused.
        """
        self._filter = ClaimFilter.of(self.registry.topics(), self.topics or None, self.all_topics)
        if self._filter.unserved and not self._filter.topics:
            raise ConfigError(
                "the worker has no listeners: import the module that registers them "
                "(horae worker --app), or pass all_topics (--all-topics) to claim every topic"
            )
        self.pool.check(self._filter.listened)
        if self.on_declare is not None:
            await self.on_declare(self._filter.listened)
        if self.on_start is not None:
            await self.on_start()
        self.metrics.start_topics(sorted({*self._filter.topics, *self._filter.listened}))
        await self._advertise()
        self._subscription = await self.store.subscribe_wake(self._wake.set)
        self._settler.start()
        self._started = True
        for name, loop in (
            ("claim", self._claim_loop()),
            ("heartbeat", self._housekeeping.heartbeat_loop()),
            ("housekeeping", self._housekeeping.loop(self.on_housekeeping)),
        ):
            self._tasks.append(asyncio.create_task(loop, name=f"horae-{name}"))
        log.info("worker started", extra={"event": "worker_started", "worker": self.id})

    async def stop(self, grace: float | None = None) -> None:
        """Stop claiming; let attempts finish up to `grace` s (None: its own); release the rest
        uncounted. A second call (or a drain under way) waits for the first to finish."""
        if self._stop_task is None:
            self._stop_task = asyncio.create_task(self._stop(grace), name="horae-stop")
        await self._stop_task

    @property
    def draining(self) -> bool:
        """It claims no more: stopping (a drain request, stop(), SIGTERM), or stopped."""
        return self._stopping

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    async def wait_stopped(self) -> None:
        """Until it stopped (after stop(), or by itself after an operator's drain request)."""
        await self._stopped.wait()

    def _drain_requested(self) -> None:
        """An operator asked this worker to drain (Scheduler.drain_worker): the SIGTERM path."""
        if self._stopping:
            return
        log.info(
            "drain requested: stopping",
            extra={"event": "worker_drain_requested", "worker": self.id},
        )
        if self.on_drain is not None:
            self.on_drain(f"draining: requested by an operator (worker {self.id})")
        self._stop_task = self._stop_task or asyncio.create_task(
            self._stop(None), name="horae-stop"
        )

    async def _stop(self, grace: float | None) -> None:
        grace = (
            grace
            if grace is not None
            else self.settings.grace_s
            if self.grace is None
            else self.grace
        )
        self._stopping = True
        self._wake.set()
        self._slot_free.set()
        claim = self._tasks[0] if self._tasks else None
        if claim:
            await asyncio.gather(claim, return_exceptions=True)
        await self._forget(
            stopping=True
        )  # claims no more: its topics fall to other live workers at once
        running = list(self._running)
        if running:
            await asyncio.wait(running, timeout=grace)
        unfinished = {t: j for t, j in self._running.items() if not t.done()}
        for task in unfinished:
            task.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)
        leases = [
            (j.id, self._leases.pop(j.id)) for j in unfinished.values() if j.id in self._leases
        ]
        await self._settler.stop()
        if leases:
            released = await self.store.release(leases, self.clock.now_ms())
            log.info(
                "released %d unfinished attempts", released, extra={"event": "worker_released"}
            )
        for task in self._tasks[1:]:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._forget()  # again: a heartbeat in flight during the first may have re-added it
        if self._side_tasks:
            await asyncio.wait(self._side_tasks, timeout=5)
        if self._subscription is not None:
            await self._subscription.aclose()
        await self.pool.close()
        self._stopped.set()
        log.info("worker stopped", extra={"event": "worker_stopped", "worker": self.id})

    def _entry(self, now: int, stopping: bool = False) -> str:
        return entry_json(
            self._filter.advertised(self.registry.topics()),
            concurrency=self.concurrency,
            running=len(self._running),
            all_topics=self._filter.all_topics,
            pid=os.getpid(),
            now_ms=now,
            ttl_ms=self.settings.registry_ttl_ms,
            stopping=stopping,
        )

    async def _advertise(self) -> None:
        """Write this worker's registry entry: it serves its topics for registry_ttl_ms more
        (stopping: it serves none, listed as draining); act on an operator's drain request."""
        now, ttl, stopping = self.clock.now_ms(), self.settings.registry_ttl_ms, self._stopping
        topics = () if stopping else self._filter.advertised(self.registry.topics())
        known = (
            []
            if stopping
            else [(t, listener_app(self.registry.listeners(t))) for t in self._filter.listened]
        )
        done = await self.store.advertise_worker(
            self.id, self._entry(now, stopping), topics, now_ms=now, ttl_ms=ttl, known=known
        )
        if done.drain_ms is not None:
            self._drain_requested()

    async def _forget(self, stopping: bool = False) -> None:
        """Leave the registry (`stopping`: stay listed as draining, serving nothing, until the
        end)."""
        try:
            now = self.clock.now_ms()
            await self.store.forget_worker(self.id, now, self._entry(now, True) if stopping else "")
        except Exception as exc:  # noqa: BLE001 - its entry expires after registry_ttl_ms anyway
            log.warning(
                "leaving the worker registry failed: %s", exc, extra={"event": "forget_error"}
            )

    @property
    def active(self) -> int:
        """Attempts running now."""
        return len(self._running)

    async def recover_expired(self) -> int:
        """Fail attempts whose lease expired (their worker died): 'worker lost'. Returns how
        many."""
        return await self._housekeeping.recover_expired()

    async def prune(self) -> int:
        """Delete finished jobs past retention; returns how many."""
        return await self._housekeeping.prune()

    # ------------------------------------------------------------- local handoff
    async def enqueue_local(self, job: NewJob, now_ms: int) -> Enqueued | None:
        """Store `job`, due now, and lease it to this worker in the same call when the worker
        runs, serves its topic and has a free slot (and no other job is due): no wake-up
        message, no claim round trip.

        Returns:
            What happened (store_bulk.Enqueued); None when this worker cannot take it (nothing
            written).
        """
        if not self._reserve(job.topic):
            return None
        leased = None
        try:
            done, leased = await self.store.enqueue_for(
                job, now_ms, self.id, self.settings.lease_ms
            )
        except Exception:
            self._unsure = True  # its lease may have landed
            raise
        finally:
            self._adopt(leased)
        return done

    def _reserve(self, topic: str) -> bool:
        """Hold a slot for a job of `topic` while the call that stores it is in flight: only of a
        topic it has listeners for (another may be known: claim.lua decides whether it waits for a
        worker)."""
        f = self._filter
        if not self._started or self._stopping or topic not in f.listened:
            return False
        if self._free() <= 0:
            return False
        self._reserved += 1
        return True

    def _adopt(self, job: ClaimedJob | None) -> None:
        """Run a job leased to this worker by enqueue_local (None: it was queued instead);
        ends the reservation either way."""
        self._reserved -= 1
        if job is not None and not self._stopping:
            self._start(job)
            return
        self._freed()  # the claim loop may be waiting for the slot this held
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
        full = False
        while not self._stopping:
            if self._free() <= 0:
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            # Under load, the jobs of a window in one claim; a backlog (the last claim came
            # back full: only the slots limit it) is claimed as slots free.
            await self._claims.wait(hurry=full)
            free = self._free()  # (a handoff may have taken a slot meanwhile)
            if self._stopping or free <= 0:
                continue
            self._wake.clear()
            limit = min(free, self.settings.claim_batch)
            try:
                if self._unsure:
                    await self._release_unknown()
                if self._next_cron is not None and self._next_cron <= self.clock.now_ms():
                    await fire_due_crons(self.store, self.clock, self.cron, self.tracer)
                self._reserved += limit  # (shared slots: no other loop claims them meanwhile)
                try:
                    jobs, next_due, self._next_cron = await self.store.claim(
                        self.clock.now_ms(),
                        limit,
                        lease_ms=self.settings.lease_ms,
                        worker_id=self.id,
                        topics=self._filter.topics,
                        unserved=self._filter.unserved,
                        listened=self._filter.listened,
                        memory_ms=self.settings.topic_memory_ms,
                    )
                finally:
                    self._reserved -= limit
                    if self.shared is not None:
                        self.shared.freed()  # slots the claim did not fill are other loops' again
                self.next_due_ms = min(
                    (t for t in (next_due, self._next_cron) if t is not None), default=None
                )
            except Exception as exc:  # noqa: BLE001 - Redis blips must not kill the worker
                log.warning("claim failed: %s", exc, extra={"event": "claim_error"})
                self._unsure = True  # the call may have leased jobs whose reply never came
                await asyncio.sleep(0.5)
                continue
            for job in jobs:
                self._start(job)
            full = len(jobs) == limit
            if full or self._stopping:
                continue
            now = self.clock.now_ms()
            deadline = min(
                t for t in (next_due, self._next_cron, now + IDLE_RECHECK_MS) if t is not None
            )
            await self.clock.sleep_until(deadline, self._wake)

    async def _release_unknown(self) -> None:
        """Give back uncounted (release.lua) the jobs leased to us that we do not run: a claim or
        handoff whose reply was lost. Not while a handoff is in flight (its job is ours): next
        round."""
        held, running = (
            await self.store.held_by(self.id),
            {job.id for job in self._running.values()},
        )
        if not self._reserved:
            unknown = [(job_id, token) for job_id, token in held if job_id not in running]
            if unknown and (n := await self.store.release(unknown, self.clock.now_ms())):
                log.warning(
                    "gave back %d jobs of a claim whose reply was lost",
                    n,
                    extra={"event": "worker_released"},
                )
            self._unsure = False

    # ------------------------------------------------------------------- running
    async def _run(self, job: ClaimedJob) -> None:
        try:
            await self._attempt(job)
        except Exception as exc:  # noqa: BLE001 - settlement failed for good (Redis down past the lease)
            log.warning(
                "attempt %d of job %s could not be settled (%s: %s); its lease expires and another "
                "worker recovers it",
                job.attempt,
                job.id,
                type(exc).__name__,
                exc,
                extra={"event": "settle_failed", "job_id": job.id, "topic": job.topic},
            )
        finally:
            self._running.pop(asyncio.current_task(), None)  # type: ignore[arg-type]
            self.metrics.active_attempts.add(-1)
            self._freed()

    def _free(self) -> int:
        """Slots free for claims and handoffs: this worker's, or its PartitionedWorker's."""
        if self.shared is not None:
            return int(self.shared.free())
        return self.concurrency - len(self._running) - self._reserved

    def _freed(self) -> None:
        if self.shared is not None:
            self.shared.freed()
        else:
            self._slot_free.set()

    async def _attempt(self, job: ClaimedJob) -> None:
        lateness_ms = max(0, self.clock.now_ms() - job.due_ms)
        if is_noop(self.tracer):  # no SDK: skip even a no-op span, a real cost on the hot path
            await self._attempt_in_span(job, INVALID_SPAN, lateness_ms)
            return
        with attempt_span(
            self.tracer,
            job.topic,
            job.trace,
            job_id=job.id,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            lateness_ms=lateness_ms,
        ) as span:
            await self._attempt_in_span(job, span, lateness_ms)

    async def _call_traced(self, fn: Listener, event: Any) -> Any:
        with listener_span(self.tracer, qualified_name(fn)):
            return await self.pool.call_listener(fn, event)

    async def _attempt_in_span(self, job: ClaimedJob, span: Span, lateness_ms: int) -> None:
        attrs = {"topic": job.topic}
        started = time.monotonic()
        self.metrics.lateness.record(lateness_ms / 1000, attrs)
        call = self._call_traced if span.is_recording() else self.pool.call_listener
        settlement = await run_attempt(
            job,
            self.registry.listeners(job.topic),
            self.clock.now_ms,
            call=call,
            validate=self.registry.validator(job.topic),
            reporter=AttemptReporter(self.store, job, self.clock.now_ms),
            result_bytes=self.result_bytes,
        )
        self._leases.pop(job.id, None)
        self.metrics.attempt_duration.record(time.monotonic() - started, attrs)
        span.set_attribute(ATTEMPT_OUTCOME, settlement.outcome)
        self.metrics.attempts.add(1, {**attrs, "outcome": settlement.outcome})
        if settlement.error is None:
            await self._settle_success(job, settlement)
        else:
            await self._settle_failure(job, settlement, settlement.error, span)

    async def _settle_success(self, job: ClaimedJob, settlement: Settlement) -> None:
        note_success(self.metrics, job, settlement)
        reply = await self._settler.settle(settlement)
        if reply is SettleCode.COMPLETED:
            note_completed(self.metrics, job)
        elif isinstance(reply, ScriptCode):
            log_lost(job.id, reply)

    async def _settle_failure(
        self, job: ClaimedJob, settlement: Settlement, error: ErrorRecord, span: Span
    ) -> None:
        span.set_status(Status(StatusCode.ERROR, f"{error['type']}: {error['message']}"))
        reply = await self._settler.settle(settlement)
        if (
            reply is not SettleCode.FAILED
        ):  # a failure for good is logged at WARNING by note_failure
            note_attempt_failed(job, settlement.outcome, error)
        if reply is SettleCode.FAILED:
            span.add_event(
                SCHEDULE_FAILED,
                {JOB_ID: job.id, JOB_ATTEMPT: job.attempt, "error.type": error["type"]},
            )
        self._after_failure(
            job.id,
            job.topic,
            job.attempt,
            error=error,
            metadata=json.loads(job.metadata_json),
            reply=reply,
        )

    def _after_failure(
        self,
        job_id: str,
        topic: str,
        attempt: int,
        error: ErrorRecord,
        metadata: Any,
        reply: SettleReply,
    ) -> None:
        """Count a written failure; a job failed for good is delivered on SCHEDULE_FAILED_TOPIC."""
        if note_failure(self.metrics, job_id, topic, attempt=attempt, error=error, reply=reply):
            self._spawn(
                self._emit_failed(
                    ScheduleFailedEvent(job_id, topic, dict(error), attempt, metadata)
                )
            )

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def _emit_failed(self, event: ScheduleFailedEvent) -> None:
        """schedule.failed, fire-and-forget: listener errors are logged, never raised."""
        listeners = self.registry.listeners(SCHEDULE_FAILED_TOPIC)
        result = await dispatch(
            listeners, event, self.settings.timeout_ms / 1000, self.pool.call_listener
        )
        for failure in result.failures:
            log.error(
                "schedule.failed listener %s raised: %r",
                failure.listener,
                failure.exception,
                extra={"event": "schedule_failed_listener_error", "job_id": event.scheduled_job_id},
            )
