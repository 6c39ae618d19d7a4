"""timestamptz on the relay's connections as microseconds, not through asyncpg's codec.

A job's rows carry about 25 instants (each event's ts and its job's created_at, the job row's
and the attempt row's times, the settlement's arrays). asyncpg's own encoder compares each
with its infinities and converts it to UTC before it subtracts the epoch: about 0.45 us a
value, a sixth of the relay's CPU per job. Here a value is the microseconds since
PostgreSQL's epoch, computed once per distinct instant (the events of a batch share few),
and read back as the aware UTC datetime asyncpg would give.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache

import asyncpg

_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# PostgreSQL's infinity and -infinity (int64 max and min), read as asyncpg reads them.
_INFINITY, _NEGATIVE_INFINITY = 2**63 - 1, -(2**63)


@lru_cache(maxsize=8192)
def _encode(value: datetime) -> tuple[int]:
    """An aware datetime as PostgreSQL's binary timestamptz (a naive one is refused)."""
    return ((value - _PG_EPOCH) // _MICROSECOND,)


def _decode(value: tuple[int]) -> datetime:
    (micros,) = value
    if micros == _INFINITY:
        return datetime.max.replace(tzinfo=UTC)
    if micros == _NEGATIVE_INFINITY:
        return datetime.min.replace(tzinfo=UTC)
    return _PG_EPOCH + timedelta(microseconds=micros)


async def use_microseconds(conn: asyncpg.Connection) -> None:
    """A connection's timestamptz values (parameters, COPY and results) through this module."""
    await conn.set_type_codec(
        "timestamptz", schema="pg_catalog", encoder=_encode, decoder=_decode, format="tuple"
    )
