"""The audit writer: one transaction per batch of outbox events, turning them
into the job index, the raw event log and the folded job and attempt rows.
The only writer of the audit tables."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime

import asyncpg

from audit.jsontext import dump_json
from audit.migrate import ensure_partitions, migrate, month_start
from audit.options import RelayOptions
from audit.relay.copyrows import copy_events
from audit.relay.fold import JobFold, fold_new
from audit.relay.foldcache import FoldCache
from audit.relay.outage import PostgresUnavailable, closed, is_outage
from audit.relay.rows import write_rollups, write_rows
from audit.relay.streamid import StreamId
from audit.relay.timestamps import use_microseconds
from audit.rollups import DepthSample
from audit.sql import query
from scheduler.core.errors import StorageError
from scheduler.core.outbox import SCHEDULED, OutboxEvent, decode_entry
from scheduler.core.timeutil import ms_to_utc

__all__ = ["BatchWriter"]

log = logging.getLogger("horae.audit")


@dataclass(frozen=True)
class _Placement:
    """Where a job of the batch would live if the index does not know it yet."""

    created_at: datetime
    sched: StreamId | None  # stream id of the batch's latest `scheduled` of the job


class _MissingPartitions(Exception):
    def __init__(self, months: set[date]) -> None:
        super().__init__(f"missing audit partitions for {sorted(months)}")
        self.months = months


# Folding a batch is CPU work on the loop the relay shares with its worker: give the loop back
# every this many jobs, so a 2,000-event batch does not hold claims and settlements for tens of ms.
YIELD_EVERY = 200


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
        out[job_id] = (
            _Placement(ms_to_utc(found[1]), found[0])
            if found is not None
            else _Placement(ms_to_utc(ts_ms), None)
        )
    return out


class BatchWriter:
    """Writes batches of events to Postgres; the only writer of the audit tables.

    Args:
        database_url: the audit database (migrated on first write).
        options: pool size and timeouts.
        folds: the relay's cache of folds to resume between batches.
    """

    def __init__(self, database_url: str, options: RelayOptions, folds: FoldCache) -> None:
        self._url = database_url
        self._options = options
        self._pool: asyncpg.Pool | None = None
        self._migrated = False
        self._months: set[date] = set()
        self._folds = folds
        # Whether this role may write the console's rollups (migration 0010): a relay role
        # granted before that migration may not, until `horae audit grant` runs again. The
        # batches go on without them meanwhile (the charts lack them; no event is refused).
        self.rollups = True

    async def _ready_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            # min_size=0: creating the pool never connects, so a relay starts while Postgres is
            # down.
            self._pool = await asyncpg.create_pool(
                self._url,
                min_size=0,
                max_size=self._options.pool_max_size,
                timeout=self._options.connect_timeout_s,
                command_timeout=self._options.command_timeout_s,
                # The batch statements take arrays and JSON documents, so a custom plan is no
                # better than the generic one, but planning against every partition costs
                # more than running them: plan each once per connection.
                server_settings={"plan_cache_mode": "force_generic_plan"},
                init=use_microseconds,
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
            writable = bool(await conn.fetchval(query("rollups_writable")))
            if not writable and self.rollups:
                log.warning(
                    "audit relay: this role may not write the console's rollups "
                    "(schedule_minute_rollups, schedule_hour_rollups: migration 0010); the "
                    "audit goes on without them. Run `horae audit grant ROLE relay` as the "
                    "schema owner again",
                    extra={"event": "audit.rollups_not_granted"},
                )
            self.rollups = writable
            self._months = {
                date(int(r["yyyymm"][:4]), int(r["yyyymm"][4:]), 1)
                for r in await conn.fetch(query("partition_months"))
            }
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
                        if (
                            not isinstance(exc, _MissingPartitions)
                            and not is_outage(exc)
                            and closed(conn)
                        ):
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

    async def record_depth(self, samples: Sequence[DepthSample], prune_before: datetime) -> None:
        """Write a queue-depth sample (migration 0010) in a transaction of its own, and delete
        minute rollups older than `prune_before`. Called by the relay between batches (never
        beside one: a connection runs one operation at a time), after a batch committed, so the
        schema is migrated.

        Raises:
            PostgresUnavailable, asyncpg.PostgresError: as write() (the caller logs and skips).
        """
        pool = await self._ready_pool()
        async with pool.acquire() as conn:
            try:
                await self._prepare(conn, set())
                if not self.rollups:
                    return
                async with conn.transaction():
                    if samples:
                        await conn.execute(
                            query("record_depth"),
                            dump_json([s.row() for s in sorted(samples, key=lambda s: s.topic)]),
                        )
                    await conn.execute(query("prune_minute_rollups"), prune_before)
            except Exception as exc:
                if not is_outage(exc) and closed(conn):
                    raise PostgresUnavailable(f"{type(exc).__name__}: {exc}") from exc
                raise

    async def _apply(
        self,
        conn: asyncpg.Connection,
        events: dict[StreamId, OutboxEvent],
        placements: dict[str, _Placement],
    ) -> int:
        ids = sorted(placements)
        # A job whose fold this relay keeps has an index row (the relay wrote it): it is locked,
        # not inserted again (an insert that conflicts costs the server more than the lock).
        held = {j for j in ids if placements[j].sched is None and j in self._folds}
        fresh = await _insert_index(conn, [j for j in ids if j not in held], placements)
        index = {j: placements[j].created_at for j in fresh}
        moves: list[tuple[str, datetime, datetime, StreamId]] = []
        known_ids = [j for j in ids if j not in fresh]
        locked = await conn.fetch(query("lock_job_index"), known_ids) if known_ids else []
        gone = held - {row["job_id"] for row in locked}
        if gone:  # its index row went away meanwhile (a dropped partition, a new database)
            found = await _insert_index(conn, sorted(gone), placements)
            fresh |= found
            index.update((j, placements[j].created_at) for j in found)
        for row in locked:
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
        pairs = await self._insert_events(conn, events, index)
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
        for n, job_id in enumerate(touched):
            if n % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(
                    0
                )  # let the worker sharing this loop claim and settle meanwhile
            mine = new.get(job_id, [])
            fold: JobFold | None
            if job_id in fresh:  # its index row is this batch's: no event of it is stored yet
                fold = JobFold(job_id, index[job_id])
                fold.stored = set()
            elif job_id in moved:
                fold = None
            else:
                fold = self._folds.resume(
                    job_id, index[job_id], applied.get(job_id), [sid for sid, _ in mine]
                )
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
        await write_rows(conn, [folds[j] for j in touched], index, fresh)
        if self.rollups:
            await write_rollups(conn, pairs, folds)
        for job_id in touched:
            self._folds.keep(folds[job_id])
        return len(pairs)

    async def _insert_events(
        self,
        conn: asyncpg.Connection,
        events: dict[StreamId, OutboxEvent],
        index: dict[str, datetime],
    ) -> list[tuple[StreamId, OutboxEvent]]:
        """Store the raw events; return those that were not stored yet (only they are folded).

        An entry is delivered once unless a relay died holding it, so a batch is first
        COPYed (binary: about half the server time of an INSERT that parses a JSON document
        and checks each row for a conflict). A stored event makes the COPY give way;
        the batch then goes through the INSERT that skips what is there (the stream id is
        the idempotency key)."""
        if await copy_events(conn, events, index):
            return list(events.items())
        inserted = await conn.fetchrow(
            query("insert_events"),
            dump_json(
                [
                    (*sid, e.job_id, e.type, e.attempt, e.ts_ms, e.fields, index[e.job_id])
                    for sid, e in events.items()
                ]
            ),
        )
        fresh = set(zip(inserted["stream_ms"], inserted["stream_seq"]))
        return [(sid, e) for sid, e in events.items() if sid in fresh]

    async def _applied(
        self, conn: asyncpg.Connection, ids: list[str], index: dict[str, datetime]
    ) -> dict[str, StreamId]:
        """The latest event folded into each job's stored row (read after the locks)."""
        rows = await conn.fetch(query("job_applied"), ids, [index[j] for j in ids])
        return {
            r["job_id"]: (r["applied_ms"], r["applied_seq"])
            for r in rows
            if r["applied_ms"] is not None
        }

    async def _move(
        self, conn: asyncpg.Connection, moves: list[tuple[str, datetime, datetime, StreamId]]
    ) -> set[str]:
        """Re-home jobs whose `scheduled` arrived after other events (rare)."""
        if not moves:
            return set()
        await conn.execute(
            query("move_job_index"),
            [m[0] for m in moves],
            [m[2] for m in moves],
            [m[3][0] for m in moves],
            [m[3][1] for m in moves],
        )
        changed = [m for m in moves if m[1] != m[2]]
        if changed:
            job_ids, old = [m[0] for m in changed], [m[1] for m in changed]
            await conn.execute(query("move_events"), job_ids, old, [m[2] for m in changed])
            await conn.execute(query("delete_moved_jobs"), job_ids, old)
            await conn.execute(query("delete_moved_attempts"), job_ids, old)
        return {m[0] for m in changed}

    async def _refold(
        self, conn: asyncpg.Connection, jobs: dict[str, datetime]
    ) -> dict[str, JobFold]:
        """Fold every stored event of these jobs from scratch (under the index locks)."""
        ids = list(jobs)
        by_job: dict[str, list[OutboxEvent]] = defaultdict(list)
        for r in await conn.fetch(query("job_events"), ids, [jobs[j] for j in ids]):
            by_job[r["job_id"]].append(
                decode_entry(f"{r['stream_ms']}-{r['stream_seq']}", json.loads(r["fields"]))
            )
        return {j: fold_new(j, jobs[j], by_job[j]) for j in ids}


async def _insert_index(
    conn: asyncpg.Connection, ids: list[str], placements: dict[str, _Placement]
) -> set[str]:
    """Insert the index rows of these jobs (sorted) where there is none; return those inserted."""
    if not ids:
        return set()
    rows = await conn.fetch(
        query("insert_job_index"),
        ids,
        [placements[j].created_at for j in ids],
        [_ms(placements[j].sched) for j in ids],
        [_seq(placements[j].sched) for j in ids],
    )
    return {r["job_id"] for r in rows}


def _ms(sid: StreamId | None) -> int | None:
    return sid[0] if sid is not None else None


def _seq(sid: StreamId | None) -> int | None:
    return sid[1] if sid is not None else None
