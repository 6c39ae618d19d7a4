"""Readiness of the processes that need PostgreSQL: `horae audit relay` (its /readyz on
--health-port, scheduler/observe/health.py) and the console (its own /readyz route)."""

from __future__ import annotations

from typing import Any

import asyncpg

from scheduler.observe.health import CHECK_TIMEOUT_S, Check, first_failure


async def postgres_reachable(url: str) -> None:
    """Connect and run SELECT 1 (a fresh connection: a pool's idle one may be dead).

    Raises:
        OSError, asyncpg.PostgresError, TimeoutError: PostgreSQL does not answer.
    """
    conn = await asyncpg.connect(url, timeout=CHECK_TIMEOUT_S)
    try:
        await conn.fetchval("SELECT 1")
    finally:
        await conn.close(timeout=1)


def readiness(
    redis: Any, database_url: str | None, running: Any = None, redis_url: str | None = None
) -> Check:
    """Ready when `running()` (if given) is true, Redis answers PING and PostgreSQL (when
    `database_url`) a query; else the first failure, passwords masked."""

    async def ping_redis() -> None:
        await redis.ping()

    async def ping_postgres() -> None:
        await postgres_reachable(database_url or "")

    checks: list[tuple[str, Any]] = [("redis", ping_redis)]
    if database_url:
        checks.append(("postgresql", ping_postgres))

    async def check() -> str | None:
        if running is not None and not running():
            return "audit relay: not running"
        return await first_failure(checks, [redis_url, database_url])

    return check
