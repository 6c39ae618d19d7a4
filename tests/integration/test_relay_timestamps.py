"""The relay's timestamptz codec (audit/relay/timestamps.py) on a real PostgreSQL, against
asyncpg's own codec as the oracle: the instants it writes (parameters, arrays, COPY) are the
ones asyncpg writes, and what it reads back is the aware UTC datetime asyncpg gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import asyncpg
import pytest

from audit.relay.timestamps import use_microseconds

INSTANTS = [
    datetime(2026, 11, 28, 23, 49, 9, 965000, tzinfo=UTC),
    datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),  # before PostgreSQL's epoch
    datetime(2026, 3, 29, 3, 30, tzinfo=timezone(timedelta(hours=2))),  # not in UTC
    datetime(1970, 1, 1, tzinfo=UTC),
]
AS_TEXT = (
    "SELECT array_agg(x::text ORDER BY n) FROM unnest($1::timestamptz[]) WITH ORDINALITY AS u(x, n)"
)


async def test_instants_are_written_and_read_as_asyncpg_does(database_url: str) -> None:
    ours, theirs = await asyncpg.connect(database_url), await asyncpg.connect(database_url)
    try:
        await use_microseconds(ours)
        written = await ours.fetchval(AS_TEXT, INSTANTS)
        oracle = await theirs.fetchval(AS_TEXT, INSTANTS)
        await ours.execute("CREATE TEMP TABLE t (n int, at timestamptz)")
        await ours.copy_records_to_table(
            "t", records=list(enumerate(INSTANTS)), columns=["n", "at"]
        )
        copied = await ours.fetchval("SELECT array_agg(at::text ORDER BY n) FROM t")
        read = await ours.fetchval("SELECT array_agg(at ORDER BY n) FROM t")
        read_by_oracle = await theirs.fetchval("SELECT $1::text[]::timestamptz[]", copied)
        bound = await ours.fetchval("SELECT $1::timestamptz", INSTANTS[0])
        infinite = await ours.fetchrow("SELECT 'infinity'::timestamptz, '-infinity'::timestamptz")
    finally:
        await ours.close()
        await theirs.close()
    assert written == oracle and copied == oracle
    assert read == read_by_oracle == INSTANTS and bound == INSTANTS[0]
    assert all(d.utcoffset() == timedelta(0) for d in read)
    assert tuple(infinite) == (datetime.max.replace(tzinfo=UTC), datetime.min.replace(tzinfo=UTC))


async def test_a_naive_datetime_is_refused(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await use_microseconds(conn)
        with pytest.raises(asyncpg.DataError, match="offset-naive"):
            await conn.fetchval("SELECT $1::timestamptz", datetime(2026, 1, 1))
    finally:
        await conn.close()
