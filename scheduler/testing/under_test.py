"""The `horae` fixture's scheduler: a Scheduler on a namespace of its own (and an audit
schema of its own), with a FakeClock, a worker running the default registry's listeners,
a TimeMachine, and assertion helpers; plus setting it up and tearing it down.

A composition root like `api.py`: it wires the audit in (a schema per test)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode

from listeners import ListenerRegistry
from scheduler.api import Scheduler
from scheduler.core.datadir import data_dir_of
from scheduler.core.errors import ConfigError
from scheduler.core.job import JobInfo, JobState
from scheduler.core.keys import Keys
from scheduler.core.procutil import scrub
from scheduler.core.timeutil import utc_to_ms
from scheduler.store.clients import ClientSettings, redis_client
from scheduler.testing.clocks import SteppingClock
from scheduler.testing.time_machine import RecordingRegistry, TimeMachine

if TYPE_CHECKING:
    from audit.records import AttemptRecord
    from horae.settings import Settings

FLUSH_TIMEOUT_S = 30.0
PAGE = 1000


@dataclass(frozen=True)
class JobRun(JobInfo):
    """A job as `horae.ran()` returns it: the JobInfo (`attempts`, `payload`, `state`,
    `last_error`, ...) plus `runs`, its attempts as the audit trail recorded them
    (`started_at`, `finished_at`, `outcome`, `error_type`, `error_message`, ...; empty
    with the audit off)."""

    runs: tuple[AttemptRecord, ...] = ()


@dataclass(frozen=True)
class Options:
    """What `@pytest.mark.horae(...)` sets: see docs/how-to/testing.md."""

    raise_errors: bool = True
    start: datetime | None = None
    audit: bool = True


class SchedulerUnderTest(Scheduler):
    """The `horae` fixture: a connected Scheduler (every method of it) whose worker runs the
    default registry's listeners, and whose clock moves only through `time_machine`
    (`horae_clock`). `scheduled`, `ran` and `failed` flush the audit before they answer."""

    time_machine: TimeMachine

    async def scheduled(self, topic: str | None = None) -> list[JobInfo]:
        """Jobs waiting to run (scheduled, or retrying after a failed attempt), of `topic`
        (None: every topic), the earliest due first."""
        jobs = [
            j
            for j in await self._every_job(topic)
            if j.state in (JobState.SCHEDULED, JobState.RETRYING)
        ]
        return sorted(jobs, key=lambda j: (j.next_attempt_at or j.run_at, j.id))

    async def ran(self, topic: str | None = None) -> list[JobInfo]:
        """Jobs that made at least one attempt (completed, failed for good, retrying,
        cancelled after running), of `topic`, by run_at: `JobRun`s, whose `attempts`
        counts the attempts and `runs` holds them as the audit recorded them."""
        jobs = sorted(
            (j for j in await self._every_job(topic) if j.attempts > 0),
            key=lambda j: (j.run_at, j.id),
        )
        return [await self._with_runs(j) for j in jobs]

    async def failed(self, topic: str | None = None) -> list[JobInfo]:
        """Jobs that failed for good, of `topic`, in the order they failed (`last_error`
        says why; `JobRun.runs` has every attempt)."""
        jobs = [j for j in await self._every_job(topic) if j.state is JobState.FAILED]
        jobs.sort(key=lambda j: (j.finished_at or j.run_at, j.id))
        return [await self._with_runs(j) for j in jobs]

    async def _every_job(self, topic: str | None) -> list[JobInfo]:
        if self._audit is not None:
            await self._audit.flush(FLUSH_TIMEOUT_S)
        jobs: list[JobInfo] = []
        cursor: str | None = None
        while True:
            page = await self.jobs(topic, None, PAGE, cursor)
            jobs += page.items
            if page.cursor is None:
                return jobs
            cursor = page.cursor

    async def _with_runs(self, job: JobInfo) -> JobRun:
        runs = tuple(await self._audit.attempts(job.id)) if self._audit is not None else ()
        return JobRun(**{f.name: getattr(job, f.name) for f in fields(JobInfo)}, runs=runs)


def with_search_path(dsn: str, schema: str) -> str:
    """`dsn` whose connections use `schema` (asyncpg passes unknown query parameters on as
    server settings). Split by hand: urlunsplit would drop the `//` of `postgresql:///db`."""
    head, hash_, fragment = dsn.partition("#")
    base, _, query = head.partition("?")
    pairs = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "search_path"]
    return f"{base}?{urlencode([*pairs, ('search_path', schema)])}{hash_}{fragment}"


async def _on_database(dsn: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def create_schema(dsn: str, schema: str) -> None:
    """Create the test's audit schema.

    Raises:
        ConfigError: PostgreSQL cannot be reached (masked URL, the reason, what to do).
    """
    try:
        await _on_database(dsn, f'CREATE SCHEMA "{schema}"')
    except Exception as exc:  # noqa: BLE001 - any driver error means the same to the test
        raise ConfigError(
            scrub(
                f"the horae fixture needs the audit database "
                f"{dsn} ({type(exc).__name__}: {exc}); set "
                "HORAE_DATABASE_URL (or [database] url in horae.toml), or "
                "test without the audit with @pytest.mark.horae(audit=False)",
                dsn,
            )
        ) from None


async def delete_namespace(
    redis_url: str, namespace: str, settings: ClientSettings | None = None
) -> None:
    """Delete every key of `namespace` (of each of its partitions too: `{ns|p}`; on a cluster,
    on every master), through a client made from `settings` (default: the defaults)."""
    client = redis_client(redis_url, settings)
    try:
        for pattern in (Keys(namespace).prefix + "*", "{" + namespace + "|*"):
            batch: list[bytes] = []
            async for key in client.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= 500:
                    await client.delete(*batch)
                    batch = []
            if batch:
                await client.delete(*batch)
    finally:
        await client.aclose()


@asynccontextmanager
async def scheduler_under_test(
    base: Settings, options: Options, registry: ListenerRegistry, default_start: datetime
) -> AsyncIterator[SchedulerUnderTest]:
    """A connected SchedulerUnderTest with its worker running, on a fresh namespace (and a
    fresh audit schema when the audit is on); both are deleted afterwards.

    Raises:
        ConfigError: the audit database cannot be reached.
    """
    from scheduler.ops.servers import resolve_services

    audit = options.audit and base.audit.enabled
    urls = await asyncio.to_thread(
        resolve_services, base.redis_url, base.database_url, data_dir_of(base), need_database=audit
    )
    suffix = uuid.uuid4().hex[:12]
    namespace, schema = f"horae-test-{suffix}", f"horae_test_{suffix}"
    if audit:
        await create_schema(urls.database_url, schema)
    settings = base.model_copy(
        update={
            "redis_url": urls.redis_url,
            "namespace": namespace,
            "database_url": with_search_path(urls.database_url, schema)
            if audit
            else base.database_url,
            # Embedded use: the relay on a thread of the test's own process (no child to spawn
            # per test; flush() is what a test waits on, not the worker's latency).
            "audit": base.audit.model_copy(update={"relay": audit, "relay_process": False}),
        }
    )
    clock = SteppingClock(utc_to_ms(options.start or default_start))
    recording = RecordingRegistry(registry, clock)
    s = SchedulerUnderTest(settings=settings, listeners=recording, clock=clock)
    try:
        await s.connect()
        worker = s.make_worker(
            all_topics=True
        )  # the namespace's only worker: every topic is its own
        s.time_machine = TimeMachine(clock, worker, recording, raise_errors=options.raise_errors)
        await worker.start()
        try:
            yield s
        finally:
            await worker.stop(grace=5)
    finally:
        await _cleanup(s.close, settings, namespace, urls.database_url if audit else None, schema)


async def _cleanup(
    close: Callable[[], Awaitable[None]],
    settings: Settings,
    namespace: str,
    dsn: str | None,
    schema: str,
) -> None:
    try:
        await close()
    finally:
        try:
            await delete_namespace(settings.redis_url or "", namespace, settings)
        finally:
            if dsn is not None:
                await _on_database(dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
