"""The audit relay: outbox stream -> Postgres. Reads batches through the
`audit` consumer group, writes each batch in one transaction, acknowledges
only after commit, and waits out Postgres outages with events kept in Redis."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import asyncpg
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from audit.fold import JobFold, dump_json, fold_new, ms_to_datetime
from audit.migrate import ensure_partitions, migrate, month_start
from audit.options import RelayOptions, default_consumer_name
from audit.records import TERMINAL
from audit.sql import query
from audit.stream import Entry, Lag, OutboxStream, decode
from audit.streamid import StreamId, parse_id
from scheduler.errors import StorageError
from scheduler.outbox import SCHEDULED, OutboxEvent, decode_entry

__all__ = ["AuditRelay", "BatchWriter", "FoldCache", "PostgresUnavailable", "RelayOptions", "is_outage"]

log = logging.getLogger("horae.audit")

# InternalClientError: asyncpg's protocol state broken by a server that vanished mid-operation.
_OUTAGE_ERRORS = (OSError, asyncio.TimeoutError, asyncpg.PostgresConnectionError,
                  asyncpg.exceptions.ConnectionDoesNotExistError, asyncpg.exceptions.OperatorInterventionError,
                  asyncpg.exceptions.InsufficientResourcesError, asyncpg.InternalClientError)


class PostgresUnavailable(StorageError):
    """Postgres could not be reached, or the connection died under a batch."""


def is_outage(exc: BaseException) -> bool:
    """Whether a Postgres error means "not reachable right now" (as opposed to a bug).

    Follows the exception chain: a dying server often surfaces as a client
    error ("the underlying connection is closed") raised while handling the
    real one.
    """
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, (PostgresUnavailable, *_OUTAGE_ERRORS)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _closed(conn: asyncpg.Connection) -> bool:
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:  # the pool already took the dead connection back
        return True


@dataclass(frozen=True)
class _Placement:
    """Where a job of the batch would live if the index does not know it yet."""

    created_at: datetime
    sched: StreamId | None  # stream id of the batch's latest `scheduled` of the job


class _MissingPartitions(Exception):
    def __init__(self, months: set[date]) -> None:
        super().__init__(f"missing audit partitions for {sorted(months)}")
        self.months = months


def _placements(events: dict[StreamId, OutboxEvent]) -> dict[str, _Placement]:
    """Where each job of the batch belongs: its latest `scheduled` here, else its earliest event."""
    first_ms: dict[str, int] = {}
    scheduled: dict[str, tuple[StreamId, int]] = {}
    for sid, e in events.items():
        if e.type == SCHEDULED and (e.job_id not in scheduled or sid > scheduled[e.job_id][0]):
            scheduled[e.job_id] = (sid, e.ts_ms)
        if e.ts_ms < first_ms.get(e.job_id, e.ts_ms + 1):
            first_ms[e.job_id] = e.ts_ms
    out: dict[str, _Placement] = {}
    for job_id, ts_ms in first_ms.items():
        found = scheduled.get(job_id)
        out[job_id] = (_Placement(ms_to_datetime(found[1]), found[0]) if found is not None
                       else _Placement(ms_to_datetime(ts_ms), None))
    return out


class BatchWriter:
    """Writes batches of events to Postgres; the only writer of the audit tables."""

    def __init__(self, database_url: str, options: RelayOptions) -> None:
        self._url = database_url
        self._options = options
        self._pool: asyncpg.Pool | None = None
        self._migrated = False
        self._months: set[date] = set()
        self._folds = FoldCache(options.fold_cache)

    async def _ready_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            # min_size=0: creating the pool never connects, so a relay starts while Postgres is down.
            self._pool = await asyncpg.create_pool(
                self._url, min_size=0, max_size=self._options.pool_max_size,
                timeout=self._options.connect_timeout_s, command_timeout=self._options.command_timeout_s,
                # The batch statements take arrays and JSON documents, so a custom plan is no
                # better than the generic one, but planning against every partition costs
                # more than running them: plan each once per connection.
                server_settings={"plan_cache_mode": "force_generic_plan"},
            )
        return self._pool

    async def close(self) -> None:
        """Close the pool; a connection stuck on a dead server is terminated."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), self._options.connect_timeout_s)
            except (TimeoutError, OSError, asyncpg.InterfaceError):
                pool.terminate()

    async def _prepare(self, conn: asyncpg.Connection, months: set[date]) -> None:
        if not self._migrated:
            await migrate(conn)
            self._migrated = True
            self._months = {date(int(r["yyyymm"][:4]), int(r["yyyymm"][4:]), 1)
                            for r in await conn.fetch(query("partition_months"))}
        missing = months - self._months
        if missing:
            await ensure_partitions(conn, missing)
            self._months |= missing

    async def write(self, events: Sequence[tuple[StreamId, OutboxEvent]]) -> int:
        """Apply (stream id, event) pairs in one transaction; return how many were new
        (not yet in Postgres).

        Raises:
            PostgresUnavailable: the server is unreachable or the connection died
                (the batch may or may not have committed; writing it again is harmless).
            asyncpg.PostgresError: anything else (a bug); nothing was committed.
        """
        unique = dict(events)
        if not unique:
            return 0
        placements = _placements(unique)
        months = {month_start(p.created_at) for p in placements.values()}
        pool = await self._ready_pool()
        for _ in range(5):
            try:
                async with pool.acquire() as conn:
                    try:
                        await self._prepare(conn, months)
                        async with conn.transaction():
                            return await self._apply(conn, unique, placements)
                    except Exception as exc:
                        # A server going down surfaces as many client errors (even
                        # "cannot switch state"); a closed connection says which it was.
                        if not isinstance(exc, _MissingPartitions) and not is_outage(exc) and _closed(conn):
                            raise PostgresUnavailable(f"{type(exc).__name__}: {exc}") from exc
                        raise
            except _MissingPartitions as missing:
                months |= missing.months
            except asyncpg.CheckViolationError as exc:
                if "no partition" not in str(exc):
                    raise
                self._migrated = False  # a partition was pruned under us: reload what exists
            except (asyncpg.UndefinedTableError, asyncpg.UndefinedFunctionError):
                self._migrated = False  # the schema went away (database recreated): migrate again
                raise
        raise StorageError("audit batch kept missing partitions after 5 tries")

    async def _apply(self, conn: asyncpg.Connection, events: dict[StreamId, OutboxEvent],
                     placements: dict[str, _Placement]) -> int:
        ids = sorted(placements)
        fresh = {r["job_id"] for r in await conn.fetch(
            query("insert_job_index"), ids, [placements[j].created_at for j in ids],
            [_ms(placements[j].sched) for j in ids], [_seq(placements[j].sched) for j in ids])}
        index = {j: placements[j].created_at for j in fresh}
        moves: list[tuple[str, datetime, datetime, StreamId]] = []
        known_ids = [j for j in ids if j not in fresh]
        for row in await conn.fetch(query("lock_job_index"), known_ids) if known_ids else ():
            job_id, created = row["job_id"], row["created_at"]
            known = (row["sched_ms"], row["sched_seq"]) if row["sched_ms"] is not None else None
            sched = placements[job_id].sched
            if sched is not None and (known is None or sched > known):
                moves.append((job_id, created, placements[job_id].created_at, sched))
                created = placements[job_id].created_at
            index[job_id] = created
        missing = {month_start(c) for c in index.values()} - self._months
        if missing:
            raise _MissingPartitions(missing)
        moved = await self._move(conn, moves)
        inserted = await conn.fetchrow(query("insert_events"), dump_json([
            (sid[0], sid[1], e.job_id, e.type, e.attempt, e.ts_ms, e.fields, index[e.job_id])
            for sid, e in events.items()]))
        if len(inserted["stream_ms"]) < len(events):  # some were in Postgres already: fold only the new ones
            fresh_sids = set(zip(inserted["stream_ms"], inserted["stream_seq"]))
            pairs = [(sid, e) for sid, e in events.items() if sid in fresh_sids]
        else:
            pairs = list(events.items())
        pairs.sort(key=lambda pair: pair[0])  # stream order
        new: dict[str, list[tuple[StreamId, OutboxEvent]]] = defaultdict(list)
        for sid, e in pairs:
            new[e.job_id].append((sid, e))
        touched = sorted(set(new) | moved)
        if not touched:
            return 0
        folds: dict[str, JobFold] = {}
        stale: dict[str, datetime] = {}
        cached = [j for j in touched if j not in fresh and j not in moved and j in self._folds]
        applied = await self._applied(conn, cached, index) if cached else {}
        for job_id in touched:
            mine = new.get(job_id, [])
            if job_id in fresh:  # its index row is this batch's: no event of it is stored yet
                fold: JobFold | None = JobFold(job_id, index[job_id])
            elif job_id in moved:
                fold = None
            else:
                fold = self._folds.resume(job_id, index[job_id], applied.get(job_id), [sid for sid, _ in mine])
            if fold is None:
                stale[job_id] = index[job_id]
                continue
            for sid, e in mine:
                fold.apply(e, sid)
            folds[job_id] = fold
        if stale:
            refolded = await self._refold(conn, stale)
            for fold in refolded.values():
                fold.dropped = True  # its stored attempt rows are unknown: check them all
            folds.update(refolded)
        await self._write_rows(conn, [folds[j] for j in touched], index)
        for job_id in touched:
            self._folds.keep(folds[job_id])
        return len(pairs)

    async def _applied(self, conn: asyncpg.Connection, ids: list[str],
                       index: dict[str, datetime]) -> dict[str, StreamId]:
        """The latest event folded into each job's stored row (read after the locks)."""
        rows = await conn.fetch(query("job_applied"), ids, [index[j] for j in ids])
        return {r["job_id"]: (r["applied_ms"], r["applied_seq"]) for r in rows if r["applied_ms"] is not None}

    async def _move(self, conn: asyncpg.Connection, moves: list[tuple[str, datetime, datetime, StreamId]]) -> set[str]:
        """Re-home jobs whose `scheduled` arrived after other events (rare)."""
        if not moves:
            return set()
        await conn.execute(query("move_job_index"), [m[0] for m in moves], [m[2] for m in moves],
                           [m[3][0] for m in moves], [m[3][1] for m in moves])
        changed = [m for m in moves if m[1] != m[2]]
        if changed:
            job_ids, old = [m[0] for m in changed], [m[1] for m in changed]
            await conn.execute(query("move_events"), job_ids, old, [m[2] for m in changed])
            await conn.execute(query("delete_moved_jobs"), job_ids, old)
            await conn.execute(query("delete_moved_attempts"), job_ids, old)
        return {m[0] for m in changed}

    async def _refold(self, conn: asyncpg.Connection, jobs: dict[str, datetime]) -> dict[str, JobFold]:
        """Fold every stored event of these jobs from scratch (under the index locks)."""
        ids = list(jobs)
        by_job: dict[str, list[OutboxEvent]] = defaultdict(list)
        for r in await conn.fetch(query("job_events"), ids, [jobs[j] for j in ids]):
            by_job[r["job_id"]].append(decode_entry(f"{r['stream_ms']}-{r['stream_seq']}", json.loads(r["fields"])))
        return {j: fold_new(j, jobs[j], by_job[j]) for j in ids}

    async def _write_rows(self, conn: asyncpg.Connection, folds: list[JobFold], index: dict[str, datetime]) -> None:
        """Upsert the folded rows of these jobs, with the last event folded into each.

        The rows go as one JSON document per table, straight from the folds' dicts
        (no record objects, no per-column arrays: this runs for every job of every batch)."""
        await conn.execute(query("upsert_jobs"), dump_json([f.job for f in folds]))
        rows = [row for f in folds for row in f.rows.values()]
        dropped = [f for f in folds if f.dropped]
        if dropped:  # attempt rows the folds no longer have (a release, a re-schedule, a refold)
            ids = [f.job["id"] for f in dropped]
            kept = [(row["job_id"], row["attempt"]) for f in dropped for row in f.rows.values()]
            await conn.execute(query("delete_stale_attempts"), ids, [index[j] for j in ids],
                               [k[0] for k in kept], [k[1] for k in kept])
            for f in dropped:
                f.dropped = False
        if rows:
            await conn.execute(query("upsert_attempts"), dump_json(rows))


class FoldCache:
    """The folds of jobs this relay wrote last, so the next batch of a job resumes its
    fold instead of re-reading and re-folding all of the job's stored events.

    A fold is only resumed when the job's audit row (read once its index row is
    locked) says the latest event folded into it is the fold's own last event:
    anything another relay or a rolled-back batch did since shows up there as a
    mismatch. Finished jobs are dropped (they rarely get another event); the rest
    are evicted oldest first.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._folds: OrderedDict[str, JobFold] = OrderedDict()

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._folds

    def resume(self, job_id: str, created_at: datetime, applied: StreamId | None,
               new: Iterable[StreamId]) -> JobFold | None:
        """The cached fold if it can take `new` as they stand, else None (fold from scratch)."""
        fold = self._folds.pop(job_id, None)
        if fold is None or applied is None or fold.last != applied or fold.job["created_at"] != created_at:
            return None
        if any(sid <= applied for sid in new):  # an older event arrived late
            return None
        return fold

    def keep(self, fold: JobFold) -> None:
        """Remember a fold just written (called before commit: resume() re-checks it)."""
        job_id = fold.job["id"]
        if fold.job["status"] in TERMINAL or self._size <= 0:
            self._folds.pop(job_id, None)
            return
        self._folds[job_id] = fold
        self._folds.move_to_end(job_id)
        while len(self._folds) > self._size:
            self._folds.popitem(last=False)


def _ms(sid: StreamId | None) -> int | None:
    return sid[0] if sid is not None else None


def _seq(sid: StreamId | None) -> int | None:
    return sid[1] if sid is not None else None


class AuditRelay:
    """Moves outbox events into Postgres; run one in every worker process.

    Args:
        redis: the application's client (its connection pool is shared).
        namespace: whose outbox stream to read.
        database_url: the audit database (migrated on first write).
        options: tuning; see RelayOptions.
    """

    def __init__(self, redis: aioredis.Redis, namespace: str, database_url: str,
                 options: RelayOptions | None = None) -> None:
        self.options = options or RelayOptions()
        self.consumer = self.options.consumer or default_consumer_name()
        self.stream = OutboxStream(redis, namespace, self.consumer)
        self.writer = BatchWriter(database_url, self.options)
        self._held: list[Entry] | None = None  # read but not yet acknowledged
        self._held_written = False
        self._group_ready = False
        self._next_claim = 0.0  # time.monotonic() of the next look for a dead relay's entries
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._pg_down_since: float | None = None
        self._redis_down_since: float | None = None

    # ------------------------------------------------------------- building blocks
    async def read_batch(self, block_ms: int | None = None) -> list[Entry]:
        """Entries idle too long at a dead consumer first, else new ones (may block)."""
        if not self._group_ready:
            await self.stream.ensure_group()
            self._group_ready = True
        # Entries only become claimable after claim_idle_ms, so looking for them
        # a few times per claim_idle_ms is enough (not one more round trip per batch).
        now = time.monotonic()
        if now >= self._next_claim:
            claimed = await self.stream.claim(self.options.claim_idle_ms, self.options.batch_size)
            if claimed:
                return claimed
            self._next_claim = now + self.options.claim_idle_ms / 10_000
        return await self.stream.read(self.options.batch_size, block_ms)

    async def write_batch(self, entries: Sequence[Entry]) -> int:
        """Commit the events of these entries to Postgres (no ack); return how many were new."""
        return await self.writer.write([pair for pair in map(decode, entries) if pair is not None])

    async def ack(self, entries: Sequence[Entry]) -> None:
        """Acknowledge entries (only ever after their batch committed)."""
        await self.stream.ack([e.stream_id for e in entries])

    async def run_once(self) -> int:
        """One batch: read (without blocking), write, ack; return the entries settled.

        A batch whose write fails is held and retried by the next call.

        Raises:
            StorageError: when Postgres or Redis fails; nothing is acknowledged.
        """
        try:
            if self._held is None:
                self._held = await self.read_batch(None)
                self._held_written = False
            return await self._settle()
        except PostgresUnavailable:
            raise
        except (RedisError, asyncpg.PostgresError, asyncpg.InterfaceError, *_OUTAGE_ERRORS) as exc:
            raise StorageError(f"audit relay: {exc}") from exc

    async def _settle(self) -> int:
        held = self._held or []
        if held and not self._held_written:
            await self.write_batch(held)
            self._held_written = True
        await self.ack(held)
        self._held = None
        return len(held)

    async def trim(self) -> StreamId | None:
        """Trim the outbox behind the slowest consumer group; return the MINID used."""
        return await self.stream.trim(self.options.trim_approximate)

    async def lag(self) -> tuple[int, float | None]:
        """(outbox events not yet committed to Postgres, age in seconds of the oldest)."""
        lag: Lag = await self.stream.lag(self.options.lag_scan_limit)
        return lag.pending, lag.oldest_age_s

    # ------------------------------------------------------------- lifecycle
    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Run the relay in a background task until stop()."""
        if self.running:
            return
        self._stopping = False
        self._task = asyncio.create_task(self._loop(), name=f"audit-relay:{self.consumer}")

    async def stop(self) -> None:
        """Drain what arrives within drain_timeout_s, then cancel; unfinished entries
        stay pending in Redis for another relay to claim."""
        task, self._stopping = self._task, True
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task),
                                       self.options.drain_timeout_s + self.options.block_ms / 1000)
            except TimeoutError:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
            self._task = None
            try:
                if self._held is None and await self.stream.pending_of_self() == 0:
                    await self.stream.delete_consumer()
            except RedisError as exc:
                log.debug("audit relay: could not remove consumer %s: %s", self.consumer, exc)
        await self.stream.aclose()
        await self.writer.close()

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_trim, acked_since_trim = 0.0, 0
        redis_failures = 0
        while True:
            try:
                if self._held is None:
                    entries = await self.read_batch(None if self._stopping else self.options.block_ms)
                    if not entries and self._stopping:
                        return
                    self._held, self._held_written = entries, False
                if self._held:
                    if not self._held_written:
                        await self._write_until_committed(self._held)
                        self._held_written = True
                    await self.ack(self._held)
                settled, self._held = len(self._held or ()), None
                if 0 < settled < self.options.batch_size and not self._stopping and self.options.linger_ms:
                    # Under a steady trickle, one transaction per few events would cost more in
                    # round trips than the events themselves: let a batch gather (audit lags by ms).
                    await asyncio.sleep(self.options.linger_ms / 1000)
                acked_since_trim += settled
                # Acknowledged entries still take Redis memory until trimmed: trim on a timer, and
                # under load as soon as a batch's worth is acknowledged (the outbox stays small).
                due = loop.time() >= next_trim
                if (due or acked_since_trim >= self.options.trim_after_entries) and not self._stopping:
                    await self.trim()
                    acked_since_trim = 0
                    if due:
                        next_trim = loop.time() + self.options.trim_interval_s
                        await self.stream.forget_dead_consumers(self.options.consumer_gc_idle_ms)
                self._redis_up(loop.time())
                redis_failures = 0
            except (RedisError, OSError) as exc:
                self._redis_down(loop.time(), exc)
                await asyncio.sleep(self._backoff(redis_failures))
                redis_failures += 1
            except Exception:  # never let the relay die silently; events stay in Redis
                log.exception("audit relay: unexpected error; retrying", extra={"event": "audit.relay_error"})
                await asyncio.sleep(self.options.retry_max_s)

    async def _write_until_committed(self, entries: Sequence[Entry]) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        touched = loop.time()
        while True:
            try:
                await self.write_batch(entries)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # every failure is retried: events are never dropped
                self._pg_down(loop.time(), exc, len(entries))
                await asyncio.sleep(self._backoff(failures))
                failures += 1
                if loop.time() - touched > self.options.claim_idle_ms / 3000:
                    touched = loop.time()
                    try:
                        await self.stream.touch([e.stream_id for e in entries])
                    except RedisError as redis_exc:
                        log.debug("audit relay: could not keep entries claimed: %s", redis_exc)
                continue
            self._pg_up(loop.time())
            return

    def _backoff(self, failures: int) -> float:
        return float(min(self.options.retry_max_s, self.options.retry_initial_s * 2 ** min(failures, 30)))

    def _pg_down(self, now: float, exc: BaseException, waiting: int) -> None:
        if self._pg_down_since is not None:
            log.debug("audit relay: Postgres still failing: %r", exc)
            return
        self._pg_down_since = now
        # One warning per outage, whatever the error; a traceback when it does not
        # look like an outage (a bug: it is retried too, events are never dropped).
        what = "PostgreSQL unavailable" if is_outage(exc) else "writing a batch to PostgreSQL failed"
        log.warning("audit relay: %s (%s: %s); events wait in Redis, retrying with backoff up to %.1fs", what,
                    type(exc).__name__, exc, self.options.retry_max_s, exc_info=None if is_outage(exc) else exc,
                    extra={"event": "audit.postgres_down", "waiting": waiting})

    def _pg_up(self, now: float) -> None:
        if self._pg_down_since is not None:
            log.info("audit relay: PostgreSQL writes resumed after %.1fs; catching up", now - self._pg_down_since,
                     extra={"event": "audit.postgres_up"})
            self._pg_down_since = None

    def _redis_down(self, now: float, exc: BaseException) -> None:
        if self._redis_down_since is None:
            self._redis_down_since = now
            log.warning("audit relay: Redis unavailable (%s: %s); retrying", type(exc).__name__, exc,
                        extra={"event": "audit.redis_down"})

    def _redis_up(self, now: float) -> None:
        if self._redis_down_since is not None:
            log.info("audit relay: Redis back after %.1fs", now - self._redis_down_since,
                     extra={"event": "audit.redis_up"})
            self._redis_down_since = None
