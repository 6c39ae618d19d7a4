"""Telling an outage of PostgreSQL (wait and retry: events stay in Redis) from an error that
no retry mends (a bug, a refused value): the relay's and the audit reader's one rule."""

from __future__ import annotations

import asyncio

import asyncpg

from scheduler.core.errors import StorageError

__all__ = ["PostgresUnavailable", "closed", "is_outage"]

# InternalClientError: asyncpg's protocol state broken by a server that vanished mid-operation.
_OUTAGE_ERRORS = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.InternalClientError,
)


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


def closed(conn: asyncpg.Connection) -> bool:
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:  # the pool already took the dead connection back
        return True
