"""Writing a batch's folded rows (audit/relay/writer.py decides which jobs and where they
live): the rows the database cannot hold yet by binary COPY (audit/relay/copyrows.py), a kept
fold's job row settled with its status columns alone, the others upserted; and the batch's
new events added to the console's rollups (audit/rollups.py)."""

from __future__ import annotations

from datetime import datetime
from operator import itemgetter
from typing import Any

import asyncpg

from audit.jsontext import dump_json
from audit.relay.copyrows import copy_attempts, copy_jobs, jsonb_text
from audit.relay.fold import SETTLED_COLUMNS, JobFold
from audit.relay.streamid import StreamId
from audit.rollups import BatchRollup
from audit.sql import query
from scheduler.core.outbox import OutboxEvent

__all__ = ["write_rollups", "write_rows"]


async def write_rows(
    conn: asyncpg.Connection,
    folds: list[JobFold],
    index: dict[str, datetime],
    fresh: set[str],
) -> None:
    """Write the folded rows of these jobs, with the last event folded into each.

    A row the database cannot hold yet is COPYed (binary, no conflict to look for): the
    job row of a job whose index row this batch inserted, an attempt row its fold has
    not written (JobFold.stored). A job row whose columns outside SETTLED_COLUMNS the
    database holds as they stand (JobFold.written) is settled with those columns alone.
    The others are upserted from one JSON document per table, straight from the folds'
    dicts (no record objects, no per-column arrays)."""
    new: list[JobFold] = []
    known: list[JobFold] = []
    settled: list[JobFold] = []
    for f in folds:
        standing = f.unsettled()
        if f.job["id"] in fresh:
            new.append(f)
        else:
            (settled if f.written == standing else known).append(f)
        f.written = standing
    if new and not await copy_jobs(conn, new):
        known += new
    if known:
        await conn.execute(query("upsert_jobs"), dump_json([f.job for f in known]))
    if settled:
        await _settle_jobs(conn, settled)
    dropped = [f for f in (*known, *settled) if f.dropped]
    if dropped:  # attempt rows the folds no longer have (a release, a re-schedule, a refold)
        ids = [f.job["id"] for f in dropped]
        kept = [(row["job_id"], row["attempt"]) for f in dropped for row in f.rows.values()]
        await conn.execute(
            query("delete_stale_attempts"),
            ids,
            [index[j] for j in ids],
            [k[0] for k in kept],
            [k[1] for k in kept],
        )
    unstored: list[dict[str, Any]] = []  # rows the database cannot hold: COPYed
    upserted: list[dict[str, Any]] = []
    for f in folds:
        for n, row in f.rows.items():
            (unstored if f.stored is not None and n not in f.stored else upserted).append(row)
        f.stored, f.dropped = set(f.rows), False
    if unstored and not await copy_attempts(conn, unstored):
        upserted += unstored
    if upserted:
        await conn.execute(query("upsert_attempts"), dump_json(upserted))


# settle_jobs' parameters, in its order: the row's key, then SETTLED_COLUMNS.
_SETTLE_KEYS = ("id", "created_at", *SETTLED_COLUMNS)
_settle_values = itemgetter(*_SETTLE_KEYS)
_LAST_ERROR_AT = _SETTLE_KEYS.index("last_error")


async def _settle_jobs(conn: asyncpg.Connection, folds: list[JobFold]) -> None:
    """Write the SETTLED_COLUMNS of job rows whose other columns the database holds as they
    stand (audit/queries.sql: settle_jobs): typed arrays, no JSON document of the whole row."""
    columns = [list(c) for c in zip(*(_settle_values(f.job) for f in folds), strict=True)]
    columns[_LAST_ERROR_AT] = [jsonb_text(v) for v in columns[_LAST_ERROR_AT]]
    await conn.execute(query("settle_jobs"), *columns)


async def write_rollups(
    conn: asyncpg.Connection,
    pairs: list[tuple[StreamId, OutboxEvent]],
    folds: dict[str, JobFold],
) -> None:
    """Add the batch's new events to the console's rollups (migration 0010), on the batch's
    connection and in its transaction: counted once with the events, never a second time."""
    rollup = BatchRollup()
    for _, e in pairs:
        fold = folds.get(e.job_id)
        topic = (fold.job["topic"] if fold is not None else "") or e.get("topic")
        rollup.add(topic, e)
    if rollup:
        await conn.execute(query("upsert_rollups"), dump_json(rollup.rows()))
