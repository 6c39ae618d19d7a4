"""The Scheduler facade: the composition root that checks requests (through
scheduler/core/validation.py) and wires the Redis store, the worker, the listeners
and (when enabled) the audit trail."""

from __future__ import annotations

import logging
import warnings
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from datetime import datetime, timedelta
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

import redis.asyncio as aioredis

from listeners import ListenerRegistry, default_registry
from scheduler.core.clock import Clock
from scheduler.core.errors import SchedulerError
from scheduler.core.flow import Dedupe
from scheduler.core.job import CronInfo, JobInfo, JobPage, JobState
from scheduler.core.request import JobRequest
from scheduler.core.retry import Backoff, RetryPolicy
from scheduler.core.stats import Stats, TopicStats
from scheduler.core.validation import check_cron_name, check_job_ref, check_job_refs, check_topic
from scheduler.facade.crons import CronSchedules
from scheduler.facade.declared_crons import DeclaredSync, sync_declared
from scheduler.facade.flows import FlowCalls
from scheduler.facade.listing import list_jobs
from scheduler.facade.operations import JobOperations
from scheduler.facade.schedule import ScheduleCalls
from scheduler.facade.scheduling import Host, Scheduling
from scheduler.facade.topics import TopicOptions, Topics
from scheduler.facade.waiting import Timeout, Waiters
from scheduler.observe.metrics import Metrics
from scheduler.observe.telemetry import setup_telemetry
from scheduler.observe.telemetry import wanted as telemetry_wanted
from scheduler.observe.tracing import get_tracer
from scheduler.ops.connection import open_connection
from scheduler.store.cluster_url import with_url_layout
from scheduler.store.partitions import parse_subset
from scheduler.store.redis import RedisStore
from scheduler.store.scripts import DrainCode
from scheduler.store.topic_memory import KnownTopic, forget_topic, known_topics
from scheduler.worker.advertise import WorkerInfo, check_worker_id, live_workers
from scheduler.worker.loop import Worker
from scheduler.worker.partitioned import AnyWorker, PartitionedWorker, SharedSlots

if TYPE_CHECKING:
    from audit import AuditRelay, AuditTrail
    from audit.relay.child import ChildRelay
    from audit.relay.thread import ThreadedRelay
    from horae.settings import Settings

log = logging.getLogger("horae")


def _renamed(old: str, new: str) -> None:
    """Warn the caller of a deprecated alias (kept one release) which name replaces it."""
    warnings.warn(
        f"Scheduler.{old} is deprecated and will be removed in the next release; "
        f"use Scheduler.{new}",
        DeprecationWarning,
        stacklevel=3,
    )


class Scheduler(ScheduleCalls, FlowCalls):
    """Schedule jobs, inspect, cancel, retry, reschedule and delete them, and run workers.

    With no redis_url / database_url (argument, env or config file) embedded
    servers are started under the data directory.
    """

    def __init__(
        self,
        redis_url: str | None = None,
        database_url: str | None = None,
        namespace: str | None = None,
        listeners: ListenerRegistry | None = None,
        *,
        settings: Settings | None = None,
        clock: Clock | None = None,
        config_path: str | Path | None = None,
    ) -> None:
        if settings is None:
            from horae.settings import load_settings  # the root's: every package's sections

            settings = load_settings(config_path)
        base = settings
        updates = {
            k: v
            for k, v in {
                "redis_url": redis_url,
                "database_url": database_url,
                "namespace": namespace,
            }.items()
            if v is not None
        }
        self.settings = with_url_layout(base.model_copy(update=updates) if updates else base)
        self.registry = listeners if listeners is not None else default_registry
        self._clock = clock
        self._redis: aioredis.Redis | None = None
        self._store: RedisStore | None = None
        self._audit: AuditTrail | None = None
        self._relay: AuditRelay | ThreadedRelay | ChildRelay | None = (
            None  # this process's audit relay (made by connect() when the audit is on)
        )
        self._workers: weakref.WeakSet[AnyWorker] = (
            weakref.WeakSet()
        )  # made here: candidates for local handoff
        self.metrics = Metrics()
        self.tracer = get_tracer()
        r = self.settings.retry
        self.default_retry = RetryPolicy(
            r.attempts, Backoff(r.backoff, r.delay_ms, r.max_delay_ms, r.jitter)
        )

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> Scheduler:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def connect(self) -> None:
        """Resolve servers (starting embedded ones when no URL is set) and connect
        (`connection.py`)."""
        s = self.settings
        if telemetry_wanted(s.telemetry):  # producers export too; once per process (telemetry.py)
            setup_telemetry(s.telemetry)
        conn = await open_connection(s, self._clock, need_database=self._audit_on)
        self.services, self._redis, self._clock, self._store = (
            conn.services,
            conn.redis,
            conn.clock,
            conn.store,
        )
        if self._audit_on:
            from audit import AuditRelay, AuditTrail, RelayOptions
            from audit.relay.thread import ThreadedRelay

            options = RelayOptions.from_settings(s.audit, partitions=s.cluster.partitions)
            self._audit = AuditTrail(self._redis, s.namespace, conn.services.database_url, options)
            await self._audit.open()
            # This process's relay: started by its first worker (start_relay), stopped by close().
            relay = AuditRelay(
                self._redis,
                s.namespace,
                conn.services.database_url,
                options,
                now_ms=self._clock.now_ms,
            )
            if s.audit.relay_process:
                from audit.relay.child import ChildRelay

                resolved = s.model_copy(
                    update={
                        "redis_url": conn.services.redis_url,
                        "database_url": conn.services.database_url,
                    }
                )
                self._relay = ChildRelay(resolved, relay)
            else:
                self._relay = ThreadedRelay(relay) if s.audit.relay_thread else relay

    @property
    def _audit_on(self) -> bool:
        return self.settings.audit.enabled and self.settings.audit.relay

    @property
    def audit(self) -> AuditTrail:
        """The Postgres audit trail: flush(), get(job_id), attempts(job_id), failures(...)."""
        if self._audit is None:
            raise SchedulerError(
                "the audit trail is not open in this process: it needs "
                "audit.enabled and audit.relay (and a connected Scheduler)"
            )
        return self._audit

    async def close(self) -> None:
        """Stop the relay, close connections (embedded servers keep running for the next
        process)."""
        waiters = self.__dict__.pop("_waiters", None)
        if waiters is not None:
            await waiters.aclose()
        if self._relay is not None:
            relay, self._relay = self._relay, None
            await relay.stop()
        if self._audit is not None:
            await self._audit.close()
            self._audit = None
        if self._store is not None:
            await self._store.aclose()
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    @property
    def store(self) -> RedisStore:
        """The namespace's store, over its partitions (one when unpartitioned)."""
        if self._store is None:
            raise SchedulerError(
                "Scheduler is not connected: use `async with Scheduler(...)` or await connect()"
            )
        return self._store

    @property
    def clock(self) -> Clock:
        if self._clock is None:
            raise SchedulerError("Scheduler is not connected")
        return self._clock

    @cached_property
    def _host(self) -> Host:
        """This Scheduler as the facade sees it: its `settings` through the engine's view
        (Host declares `settings` writable, so the root's model does not match it as is)."""
        return cast(Host, self)

    @cached_property
    def _scheduling(self) -> Scheduling:
        return Scheduling(self._host, self._workers)

    # --------------------------------------------------- cron (scheduler/facade/crons.py)
    @cached_property
    def _crons(self) -> CronSchedules:
        return CronSchedules(self._host, self._scheduling.build_job)

    async def schedule_cron(
        self,
        name: str,
        cron: str,
        *,
        topic: str,
        tz: str = "UTC",
        payload: Any = None,
        retry: RetryPolicy | Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        misfire: str | None = None,
        timeout: timedelta | float | str | None = None,
        key: str | None = None,
        dedupe: Dedupe | None = None,
        priority: int | str | None = None,
    ) -> CronInfo:
        """Create or update (by name) a recurring schedule; each tick becomes an ordinary job
        (`scheduler/facade/crons.py` documents the arguments). Raises ScheduleError; nothing is
        stored."""
        request = JobRequest(
            topic=topic,
            tz=tz,
            payload=payload,
            retry=retry,
            metadata=metadata,
            timeout=timeout,
            key=key,
            dedupe=dedupe,
            priority=priority,
        )
        return await self._crons.schedule(name, cron, request, misfire)

    async def delete_cron(self, name: str) -> bool:
        """Remove a schedule (jobs it created stay). False when there was none."""
        return await self.store.remove_cron(check_cron_name(name))

    async def unschedule(self, name: str) -> bool:
        """Deprecated (one release): delete_cron, named like the other *_cron calls."""
        _renamed("unschedule", "delete_cron")
        return await self.delete_cron(name)

    async def pause_cron(self, name: str) -> bool:
        """Stop firing ticks until resumed. False when already paused; InvalidCron if unknown."""
        return await self._crons.set_paused(name, True)

    async def resume_cron(self, name: str) -> bool:
        """Fire again from the next tick after now (ticks passed while paused do not run)."""
        return await self._crons.set_paused(name, False)

    async def _sync_declared(self, topics: Sequence[str]) -> DeclaredSync:
        """A starting worker's: the schedules declared beside the listeners of `topics`
        (declared_crons.py)."""
        return await sync_declared(self._crons, self.store, self.registry, topics)

    async def list_crons(self) -> list[CronInfo]:
        """Every schedule: name, cron, tz, topic, next_run_at (aware UTC), paused, last_run_at."""
        return await self.store.list_crons()

    async def get_cron(self, name: str) -> CronInfo | None:
        """One schedule, or None."""
        return await self.store.get_cron(check_cron_name(name))

    # ---------------------------------------------------------------- inspecting
    async def get_job(self, job_id: str) -> JobInfo | None:
        """The job's current state, or None when unknown or past retention."""
        return await self.store.get_job(check_job_ref(job_id))

    @cached_property
    def _waiters(self) -> Waiters:
        return Waiters(self.store)

    async def wait(self, job_id: str, timeout: Timeout = None) -> JobInfo:
        """The job once it is completed, failed (for good) or cancelled; at once when it already is.
        Woken by the engine, not by polling (`waiting.py`); `timeout` (seconds, a timedelta or
        "30s"; real time, not the scheduler's clock) raises WaitTimeout, a TimeoutError; an
        unknown id, or a job deleted while waited for, raises JobNotFound."""
        return await self._waiters.wait(check_job_ref(job_id), timeout)

    async def wait_many(self, job_ids: Iterable[str], timeout: Timeout = None) -> list[JobInfo]:
        """wait() for every job, one timeout for all: their JobInfo in the order of `job_ids`."""
        return await self._waiters.wait_many(check_job_refs(job_ids, "job_ids"), timeout)

    async def cancel(self, job_id: str, *, actor: str | None = None) -> bool:
        """Stop all future attempts. False when the job is unknown or already finished.

        A running attempt finishes (its outcome is recorded) but the job ends cancelled.
        """
        return await self._operations.cancel(job_id, actor)

    # ---------------------------------------------- job operations (scheduler/facade/operations.py)
    # Each is audited with its actor: `actor=`, else `with s.acting_as(name):`, else user@host.
    @cached_property
    def _operations(self) -> JobOperations:
        return JobOperations(self)

    def acting_as(self, actor: str) -> AbstractContextManager[None]:
        """Record `actor` as who did the job operations of the block (this task and its
        children)."""
        return self._operations.acting_as(actor)

    async def retry(self, job_id: str, *, actor: str | None = None) -> bool:
        """Run a failed or cancelled job again, due now, with a fresh budget of max_attempts
        (attempt numbers go on in the audit). False for any other state or an unknown id."""
        return await self._operations.retry(job_id, actor)

    async def reschedule(
        self, job_id: str, run_at: datetime, tz: str = "UTC", *, actor: str | None = None
    ) -> bool:
        """Move a scheduled or retrying job to `run_at` (as schedule_at reads it; past = now).
        False when running, finished or unknown; a bad run_at or tz raises as schedule_at does."""
        return await self._operations.reschedule(job_id, run_at, tz, actor)

    async def delete(self, job_id: str, *, actor: str | None = None) -> bool:
        """Remove a job that is not running (its id is free again). False when running or
        unknown."""
        return await self._operations.delete(job_id, actor)

    async def cancel_many(self, ids: Iterable[str], *, actor: str | None = None) -> int:
        """Cancel each job (each atomically, pipelined); how many were cancelled."""
        return await self._operations.cancel_many(ids, actor)

    async def stats(self, topic: str | None = None) -> Stats:
        """Jobs per state currently in Redis (of one topic, or all); dead letters waiting in their
        queue under their own key, `dead_letter` (not `scheduled`). A Stats: a dict[str, int]
        with the counts as attributes too (`.scheduled`, `.total`)."""
        return Stats(await self.store.stats(None if topic is None else check_topic(topic)))

    async def stats_by_topic(self) -> TopicStats:
        """Jobs per state currently in Redis, per topic that has any (sorted by topic): a
        TopicStats, a dict of Stats."""
        by_topic = await self.store.stats_by_topic()
        return TopicStats((t, Stats(c)) for t, c in by_topic.items())

    # ----------------------------------------- topics and dead letters (scheduler/facade/topics.py)
    @cached_property
    def _topics(self) -> Topics:
        return Topics(self, self._operations.actor)

    async def configure_topic(self, name: str, options: TopicOptions) -> None:
        """Create or replace a topic's TopicOptions. Raises a ScheduleError naming the field
        (TopicPolicyLocked when the stored policy differs); nothing is stored."""
        await self._topics.configure(name, options)

    async def get_topic(self, name: str) -> TopicOptions | None:
        """The stored TopicOptions of a topic (normalised), or None."""
        return await self._topics.get(name)

    async def list_topics(self) -> list[str]:
        """Every configured topic's name, sorted."""
        return await self._topics.names()

    async def delete_topic(self, name: str, force: bool = False) -> bool:
        """Delete a topic's configuration; TopicInUse while it has jobs, unless `force`."""
        return await self._topics.delete(name, force)

    async def blocked_keys(self, topic: str) -> list[str]:
        """The keys of a key_strict_fifo topic whose queue is blocked (by a failed job), sorted."""
        return await self._topics.blocked_keys(topic)

    async def dead_letters(
        self, topic: str, limit: int = 100, cursor: str | None = None
    ) -> JobPage:
        """A page (`.items` JobInfo, oldest first; `.cursor`, None on the last page) of `topic`'s
        dead letters."""
        return await self._topics.dead_letters(topic, limit, cursor)

    async def replay(self, job_id: str, *, actor: str | None = None) -> str:
        """Schedule a dead letter's payload again on its source topic (due now) and remove it; the
        new id."""
        return await self._topics.replay(job_id, self._scheduling.build_job, actor)

    async def purge_dead_letters(self, topic: str, *, actor: str | None = None) -> int:
        """Remove every dead letter held on `topic`; how many."""
        return await self._topics.purge(topic, actor)

    # -------------------------------------------------------- listing and bulk
    async def jobs(
        self,
        topic: str | None = None,
        state: JobState | str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        *,
        key: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> JobPage:
        """One page of jobs of `topic`, `state` and `key` (None: all) whose time lies in
        [since, until], `cursor` from the previous page (`scheduler/facade/listing.py` documents the
        order and the arguments; docs/how-to/listing-and-bulk.md)."""
        return await list_jobs(
            self.store, topic, state, limit, cursor, key=key, since=since, until=until
        )

    # ------------------------------------------------------------------- workers
    async def start_relay(self) -> None:
        """Relay the audit outbox to Postgres from this process (idempotent; no-op with the audit
        off).

        Every worker started from this scheduler calls it; a process without a worker
        may call it so that its own events reach Postgres without waiting for one.
        """
        if self._relay is not None:
            await self._relay.start()

    async def _observe_audit_lag(self) -> None:
        if self._relay is not None and self._relay.running:
            pending, age = await self._relay.lag()
            self.metrics.outbox_pending, self.metrics.outbox_oldest_age_s = pending, age

    async def workers(self) -> list[WorkerInfo]:
        """The live workers of this namespace, as their last heartbeat advertised them."""
        return live_workers(await self.store.worker_entries(), self.clock.now_ms())

    async def known_topics(self) -> list[KnownTopic]:
        """Topics a worker served within [worker] topic_memory, each with the due jobs that wait for
        a worker while none serves it (scheduler/store/topic_memory.py)."""
        return await known_topics(
            self.store, self.clock.now_ms(), self.settings.worker.topic_memory_ms
        )

    async def forget_topic(self, topic: str) -> bool:
        """Forget that a worker served `topic`: its due jobs complete as no_listener unless a worker
        with listeners for it serves it again. False when it was not known."""
        return await forget_topic(self.store, topic, self.clock.now_ms())

    async def drain_worker(self, worker_id: str) -> bool:
        """Ask the live worker `worker_id` to drain and exit (docs/how-to/deploying.md): at its next
        heartbeat it stops claiming, lets its attempts finish within its grace, releases the rest
        and leaves (`horae worker` exits 0). True when asked (now or before); False when no live
        worker has that id."""
        code = await self.store.request_drain(check_worker_id(worker_id), self.clock.now_ms())
        return code is not DrainCode.NO_WORKER

    def make_worker(
        self,
        concurrency: int | None = None,
        topics: Sequence[str] | None = None,
        all_topics: bool = False,
        grace: float | None = None,
    ) -> AnyWorker:
        """A Worker bound to this scheduler (start()/stop() it yourself); it relays the audit too.
        It claims `topics`, or by default the topics it has listeners for plus those no live
        worker serves; `all_topics`: every topic. While it runs, jobs this scheduler schedules
        for now may be leased to it directly (settings.worker.local_handoff). Its start stores
        the schedules declared beside the listeners it serves (docs/how-to/cron.md). `grace`:
        seconds its attempts may finish when it stops or drains (None: [worker] grace_s)."""
        store = self.store

        def make(part: RedisStore, worker_id: str | None, slots: SharedSlots | None) -> Worker:
            return Worker(
                part,
                self.registry,
                self.clock,
                settings=self.settings.worker,
                retention=self.settings.retention,
                metrics=self.metrics,
                cron=self.settings.cron,
                tracer=self.tracer,
                concurrency=concurrency,
                topics=topics,
                all_topics=all_topics,
                worker_id=worker_id,
                shared=slots,
                grace=grace,
                result_bytes=self.settings.limits.result_bytes,
            )

        worker: AnyWorker
        if store.count > 1:  # one loop per served partition (worker/partitioned.py)
            worker = PartitionedWorker(
                lambda p, worker_id, slots: make(store.partition(p), worker_id, slots),
                parse_subset(self.settings.worker.partitions, store.count),
                store.partition_for,
                concurrency or self.settings.worker.concurrency,
            )
        else:
            worker = make(store, None, None)
        self._workers.add(worker)
        worker.on_declare = self._sync_declared
        if self._audit is not None:
            worker.on_start = self.start_relay
            worker.on_housekeeping = self._observe_audit_lag
        return worker

    @asynccontextmanager
    async def worker(
        self,
        concurrency: int | None = None,
        topics: Sequence[str] | None = None,
        grace: float | None = None,
        all_topics: bool = False,
    ) -> AsyncIterator[AnyWorker]:
        """Run a worker in the background for the duration of the block; stop gracefully."""
        w = self.make_worker(concurrency, topics, all_topics, grace)
        await w.start()
        try:
            yield w
        finally:
            await w.stop(grace)
