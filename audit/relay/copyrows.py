"""The audit rows as binary COPY takes them, for rows that cannot conflict: columns in a fold's
own order, values with their JSON encoded, and a COPY that gives way (returns False) when it
cannot be taken, so the caller sends the statement it stands in for (audit/relay/writer.py
decides which rows may be COPYed)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any

import asyncpg

from audit.jsontext import JsonText, dump_json
from audit.relay.fold import ATTEMPT_KEYS, JOB_COLUMNS, JobFold
from audit.relay.streamid import StreamId
from scheduler.core.outbox import OutboxEvent
from scheduler.core.timeutil import ms_to_utc

__all__ = ["copy_attempts", "copy_events", "copy_jobs", "jsonb_text"]

_EVENT_COLUMNS = (
    "stream_ms",
    "stream_seq",
    "job_id",
    "event_type",
    "attempt_no",
    "ts",
    "fields",
    "job_created_at",
)
# schedule_audit's columns are fold.JOB_COLUMNS; schedule_attempts' are fold.ATTEMPT_KEYS, two
# of them named otherwise there.
_ATTEMPT_COLUMNS = ("job_id", "attempt_no", "worker_id", *ATTEMPT_KEYS[3:])
_JSON = frozenset({"last_error", "payload", "metadata", "logs", "result"})
_JOB_JSON_AT = tuple(i for i, k in enumerate(JOB_COLUMNS) if k in _JSON)
_ATTEMPT_JSON_AT = tuple(i for i, k in enumerate(ATTEMPT_KEYS) if k in _JSON)
# a row's values in column order, as a tuple (itemgetter of many keys)
_JOB_VALUES: Callable[[dict[str, Any]], tuple[Any, ...]] = itemgetter(*JOB_COLUMNS)
_ATTEMPT_VALUES: Callable[[dict[str, Any]], tuple[Any, ...]] = itemgetter(*ATTEMPT_KEYS)

# Why a COPY may fail where the statement it stands in for does not: a row already stored,
# or a value the client cannot encode (the statement's server-side cast then refuses it with
# a message naming the type and the value, or takes it).
_COPY_REFUSED = (
    asyncpg.UniqueViolationError,
    asyncpg.DataError,
    OverflowError,
    ValueError,
    TypeError,
)


async def copy_events(
    conn: asyncpg.Connection,
    events: Mapping[StreamId, OutboxEvent],
    created_at: Mapping[str, datetime],
) -> bool:
    """COPY the raw events (each job's at its index row's created_at); False when refused."""
    records = [
        (
            *sid,
            e.job_id,
            e.type,
            e.attempt,
            ms_to_utc(e.ts_ms),
            dump_json(e.fields),
            created_at[e.job_id],
        )
        for sid, e in events.items()
    ]
    return await _copied(conn, "schedule_events", records, _EVENT_COLUMNS)


async def copy_jobs(conn: asyncpg.Connection, folds: Sequence[JobFold]) -> bool:
    """COPY the job rows of these folds; False when refused."""
    records = [_record(f.job, _JOB_VALUES, _JOB_JSON_AT) for f in folds]
    return await _copied(conn, "schedule_audit", records, JOB_COLUMNS)


async def copy_attempts(conn: asyncpg.Connection, rows: Sequence[dict[str, Any]]) -> bool:
    """COPY these attempt rows of folds; False when refused."""
    records = [_record(row, _ATTEMPT_VALUES, _ATTEMPT_JSON_AT) for row in rows]
    return await _copied(conn, "schedule_attempts", records, _ATTEMPT_COLUMNS)


async def _copied(
    conn: asyncpg.Connection, table: str, records: Sequence[Sequence[Any]], columns: tuple[str, ...]
) -> bool:
    """COPY the records in a savepoint of their own; False (nothing written) when refused."""
    try:
        async with conn.transaction():
            await conn.copy_records_to_table(table, records=records, columns=columns)
    except _COPY_REFUSED:
        return False
    return True


def _record(
    row: dict[str, Any],
    values_of: Callable[[dict[str, Any]], tuple[Any, ...]],
    json_at: tuple[int, ...],
) -> list[Any]:
    """A fold's row as COPY takes it: its values in column order, JSON (at json_at) as text."""
    values = list(values_of(row))
    for i in json_at:
        values[i] = jsonb_text(values[i])
    return values


def jsonb_text(value: object) -> str | None:
    """A JSON column's value as the text a jsonb parameter or COPY takes (None: SQL NULL)."""
    if value is None:
        return None
    return value.text if isinstance(value, JsonText) else dump_json(value)
