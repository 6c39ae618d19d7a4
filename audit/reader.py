"""The audit trail's read side (`Scheduler.audit`): flush, get, attempts,
events, failures and lag. It runs no relay: the composition root does."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import date, datetime
from types import TracebackType
from typing import cast

import asyncpg
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from audit.migrate import migrate
from audit.options import RelayOptions
from audit.records import AttemptRecord, AuditRecord, OperatorAction
from audit.relay.outage import is_outage
from audit.relay.stream_partitioned import outbox_stream
from audit.rollups import RollupRow
from audit.sql import query
from scheduler.core.errors import AuditUnavailable, StorageError
from scheduler.core.outbox import Outcome, Status

log = logging.getLogger("horae.audit")


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


def _past_prefix(prefix: str) -> str:
    """The first text after every text that starts with `prefix`, in code point order (its last
    character moved one code point on; a last U+10FFFF dropped and the one before moved on)."""
    head = prefix.rstrip(chr(0x10FFFF))
    if not head:
        return chr(0x10FFFF) * (len(prefix) + 1)  # (nothing sorts after: bound by length)
    following = ord(head[-1]) + 1
    return head[:-1] + chr(0xE000 if following == 0xD800 else following)  # (no surrogate)


def _storable(text: str) -> bool:
    """Whether PostgreSQL can hold `text` (no NUL, no unpaired surrogate): others match nothing."""
    return "\x00" not in text and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _record(row: asyncpg.Record) -> AuditRecord:
    metadata = row["metadata"]
    last_error = row["last_error"]
    return AuditRecord(
        id=row["id"],
        topic=row["topic"],
        status=cast(Status, row["status"]),
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        backoff_type=row["backoff_type"],
        backoff_delay_ms=row["backoff_delay_ms"],
        last_error=last_error if isinstance(last_error, dict) else None,
        run_at=row["run_at"],
        tz=row["tz"],
        payload=row["payload"],
        metadata=metadata if isinstance(metadata, dict) else None,
        trace_id=row["trace_id"],
        cron_name=row["cron_name"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        completed_at=row["completed_at"],
        failed_at=row["failed_at"],
        cancelled_at=row["cancelled_at"],
        deduplicated=row["deduplicated"],
        parents=tuple(row.get("parents") or ()),
    )


def _attempt(row: asyncpg.Record) -> AttemptRecord:
    return AttemptRecord(
        job_id=row["job_id"],
        attempt=row["attempt_no"],
        worker=row["worker_id"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        outcome=cast(Outcome | None, row["outcome"]),
        error_type=row["error_type"],
        error_message=row["error_message"],
        duration_ms=row["duration_ms"],
        lateness_ms=row["lateness_ms"],
        progress_percent=row["progress_percent"],
        progress_message=row["progress_message"],
        logs=row["logs"],
        result=row["result"],
    )


class FlushUnavailable(AuditUnavailable, TimeoutError):
    """A flush timed out while PostgreSQL does not answer: an AuditUnavailable, and still the
    TimeoutError a flush raises when its events do not commit in time."""


class AuditTrail:
    """Read the audit trail.

    Args:
        redis: the application's Redis client (flush and lag use it).
        namespace: the scheduler namespace whose outbox feeds this trail.
        database_url: the audit database.
        options: timeouts and the lag scan limit (RelayOptions.from_settings).
    """

    def __init__(
        self, redis: aioredis.Redis, namespace: str, database_url: str, options: RelayOptions
    ) -> None:
        self._url = database_url
        self.options = options
        self._stream = outbox_stream(redis, namespace, "flush", options.partitions)
        self._pool: asyncpg.Pool | None = None

    async def __aenter__(self) -> AuditTrail:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Create the connection pool and apply migrations.

        Postgres being down is not an error here (workers must keep running):
        it is logged, and the relay migrates once Postgres answers.

        Raises:
            StorageError: when a migration itself is wrong.
        """
        if self._pool is None:
            self._pool = await asyncpg.create_pool(
                self._url,
                min_size=0,
                max_size=4,
                init=_init_connection,
                timeout=self.options.connect_timeout_s,
                command_timeout=self.options.command_timeout_s,
            )
        try:
            async with self._pool.acquire() as conn:
                await migrate(conn)
        except Exception as exc:
            if not is_outage(exc):
                raise
            log.warning(
                "audit: PostgreSQL unavailable at start (%s); the relay will migrate and catch up "
                "when it answers",
                exc,
                extra={"event": "audit.postgres_down"},
            )

    async def close(self) -> None:
        """Close the pool."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    async def flush(self, timeout: float = 10) -> None:
        """Return once every outbox event written before the call is committed in Postgres.

        Works whichever process runs the relay: it waits for the `audit` group
        to deliver past the stream's last id and to hold nothing pending at or
        below it (entries are acknowledged only after their commit).

        Raises:
            TimeoutError: naming how many events are still waiting and for how long.
            FlushUnavailable: that TimeoutError, also an AuditUnavailable, when PostgreSQL
                does not answer either (nothing can commit until it does).
            StorageError: Redis (the outbox) cannot be read.
        """
        try:
            await self._stream.wait_committed(timeout)
        except RedisError as exc:
            raise StorageError(f"redis read of the audit outbox failed: {exc}") from exc
        except TimeoutError as exc:
            if (down := await self._unreachable()) is not None:
                raise FlushUnavailable(f"{exc}; PostgreSQL does not answer: {down}") from exc
            raise

    async def _unreachable(self) -> str | None:
        """Why PostgreSQL cannot be reached now, or None when it answers (or this trail is not
        open)."""
        if self._pool is None:
            return None
        try:
            async with self._conn() as conn:
                await conn.fetchval("SELECT 1")
        except AuditUnavailable as exc:
            return str(exc.__cause__ or exc)
        except StorageError:
            return None  # it answered, with an error: not an outage
        return None

    async def lag(self) -> tuple[int, float | None]:
        """(outbox events not yet committed, age in seconds of the oldest).

        Raises:
            StorageError: Redis (the outbox) cannot be read.
        """
        try:
            lag = await self._stream.lag(self.options.lag_scan_limit)
        except RedisError as exc:
            raise StorageError(f"redis read of the audit outbox failed: {exc}") from exc
        return lag.pending, lag.oldest_age_s

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[asyncpg.Connection]:
        if self._pool is None:
            raise RuntimeError("AuditTrail.open() was not called")
        try:
            async with self._pool.acquire() as conn:
                yield conn
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            if is_outage(
                exc
            ):  # unreachable, or the connection died: AuditUnavailable (a StorageError)
                raise AuditUnavailable(
                    f"audit trail query failed: {exc or type(exc).__name__}"
                ) from exc
            raise StorageError(f"audit trail query failed: {exc}") from exc

    async def get(self, job_id: str) -> AuditRecord | None:
        """The job's audit row, or None when the trail has not seen the job.

        Raises:
            AuditUnavailable: PostgreSQL cannot be reached; StorageError: it failed otherwise.
        """
        if not _storable(job_id):
            return None  # no job can have it: PostgreSQL refuses the text
        async with self._conn() as conn:
            row = await conn.fetchrow(query("get_job"), job_id)
        return _record(row) if row is not None else None

    async def statuses(self, job_ids: list[str]) -> dict[str, str]:
        """The status of each job the trail has seen (one indexed read for all: the console's
        schedule history asks for a page of tick ids at once); unseen ids are left out."""
        ids = [i for i in job_ids if _storable(i)]
        if not ids:
            return {}
        async with self._conn() as conn:
            rows = await conn.fetch(query("job_statuses"), ids)
        return {r["job_id"]: str(r["status"]) for r in rows}

    async def by_id_prefix(
        self, prefix: str, after: str = "", limit: int = 50
    ) -> list[AuditRecord]:
        """The jobs whose id starts with `prefix`, by id, after the id `after` (keyset paging):
        one range of the primary key, exact where the database's collation orders by code point
        (C, C.UTF-8); another collation may leave some out, never add one.

        Raises:
            ValueError: an empty prefix (every job: that is a listing, not a search).
        """
        if not prefix:
            raise ValueError("an id prefix must not be empty")
        if not _storable(prefix) or not _storable(after):
            return []
        async with self._conn() as conn:
            rows = await conn.fetch(
                query("jobs_by_id_prefix"), prefix, _past_prefix(prefix), after, limit
            )
        return [_record(r) for r in rows]

    async def attempts(self, job_id: str) -> list[AttemptRecord]:
        """The job's attempts, ordered by attempt number."""
        if not _storable(job_id):
            return []
        async with self._conn() as conn:
            return [_attempt(r) for r in await conn.fetch(query("get_attempts"), job_id)]

    async def events(self, job_id: str) -> list[tuple[str, str, int, datetime, dict[str, str]]]:
        """The job's raw outbox events in stream order: (stream id, type, attempt, ts, fields)."""
        if not _storable(job_id):
            return []
        async with self._conn() as conn:
            rows = await conn.fetch(query("get_events"), job_id)
        return [
            (
                f"{r['stream_ms']}-{r['stream_seq']}",
                r["event_type"],
                r["attempt_no"],
                r["ts"],
                json.loads(r["fields"]),
            )
            for r in rows
        ]

    async def failures(
        self, topic: str | None = None, since: datetime | None = None, limit: int = 100
    ) -> list[AuditRecord]:
        """Jobs that failed for good, newest first, optionally of one topic and since an instant."""
        async with self._conn() as conn:
            rows = await conn.fetch(query("failures"), topic, since, limit)
        return [_record(r) for r in rows]

    async def record_action(
        self,
        actor: str,
        role: str,
        action: str,
        target: str,
        outcome: str,
        detail: dict[str, object] | None = None,
    ) -> None:
        """Append an operator's action to the action log (console/, migration 0008)."""
        text = json.dumps(detail, default=str) if detail is not None else None
        async with self._conn() as conn:
            await conn.execute(query("record_action"), actor, role, action, target, outcome, text)

    async def actions(self, target: str | None = None, limit: int = 50) -> list[OperatorAction]:
        """The latest operator actions, newest first (of one target: a job id, schedule or
        topic)."""
        async with self._conn() as conn:
            if target is None:
                rows = await conn.fetch(query("recent_actions"), limit)
            else:
                rows = await conn.fetch(query("recent_actions_of"), target, limit)
        return [
            OperatorAction(
                at=r["at"],
                actor=r["actor"],
                role=r["role"],
                action=r["action"],
                target=r["target"],
                outcome=r["outcome"],
                detail=json.loads(r["detail"]) if r["detail"] is not None else None,
            )
            for r in rows
        ]

    async def finished_since(self, since: datetime) -> dict[str, tuple[int, int]]:
        """Per topic since `since`: (jobs that completed, jobs that failed for good)."""
        async with self._conn() as conn:
            rows = await conn.fetch(query("finished_last_hour"), since)
        return {r["topic"]: (r["completed"], r["failed"]) for r in rows}

    async def failure_baseline(self, since: date, until: date) -> dict[str, float]:
        """Per topic, the mean daily failure rate of the nightly report's days in [since, until)."""
        async with self._conn() as conn:
            rows = await conn.fetch(query("failure_baseline"), since, until)
        return {r["topic"]: float(r["rate"]) for r in rows}

    async def rollups(
        self, since: datetime, hourly: bool, topic: str | None = None
    ) -> list[RollupRow]:
        """The console's rollups (migration 0010) from `since`: minute rows, or hour rows when
        `hourly`; of every topic or of one. By topic, then time."""
        if topic is None:
            sql = query("hour_rollups") if hourly else query("minute_rollups")
        else:
            sql = query("topic_hour_rollups") if hourly else query("topic_minute_rollups")
        async with self._conn() as conn:
            rows = await (
                conn.fetch(sql, since) if topic is None else conn.fetch(sql, since, topic)
            )
        return [
            RollupRow(
                topic=r["topic"],
                at=r["at"],
                completed=r["completed"],
                failed=r["failed"],
                failed_attempts=r["failed_attempts"],
                retried=r["retried"],
                deduplicated=r["deduplicated"],
                lateness=tuple(r["lateness"]),
                waiting=r["waiting"],
                retrying=r["retrying"],
            )
            for r in rows
        ]

    async def failure_errors(
        self, topic: str, since: datetime, limit: int
    ) -> list[tuple[str, dict[str, object] | None]]:
        """(job id, last error) of `topic`'s jobs that failed for good since `since`, newest
        first, `limit` at most (an index range: bounded whatever the volume)."""
        async with self._conn() as conn:
            rows = await conn.fetch(query("recent_failure_errors"), topic, since, limit)
        out: list[tuple[str, dict[str, object] | None]] = []
        for r in rows:
            error = json.loads(r["last_error"]) if r["last_error"] is not None else None
            out.append((r["id"], error if isinstance(error, dict) else None))
        return out
