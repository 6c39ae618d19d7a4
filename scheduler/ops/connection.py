"""Connecting a Scheduler to Redis: resolve the servers (starting embedded ones when no
URL is set), open the pooled client, calibrate the clock to the server, make the store."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import redis.asyncio as aioredis

from scheduler.core.clock import Clock, SystemClock
from scheduler.core.config import Settings
from scheduler.core.datadir import data_dir_of
from scheduler.core.errors import ServerUnavailable, StorageError
from scheduler.core.procutil import scrub
from scheduler.ops.servers import ServiceUrls, resolve_services
from scheduler.store.base import server_unavailable
from scheduler.store.clients import redis_client
from scheduler.store.redis import RedisStore


@dataclass(frozen=True)
class Connection:
    """What connect() keeps: the resolved URLs, the client (owning its pool), the clock, the
    store."""

    services: ServiceUrls
    redis: aioredis.Redis
    clock: Clock
    store: RedisStore


async def open_connection(
    settings: Settings, clock: Clock | None, *, need_database: bool
) -> Connection:
    """Resolve the servers and connect to Redis.

    Args:
        settings: the URLs, data directory, pool size, namespace and audit switch.
        clock: the clock to keep; None: a SystemClock calibrated to the server's TIME.
        need_database: resolve (or start) Postgres too.

    Returns:
        The connection; closing `redis` closes its pool.

    Raises:
        StorageError: Redis cannot be reached (the client is closed again).
    """
    urls, redis, clock = await open_redis(settings, clock, need_database=need_database)
    try:
        store = await _store(redis, settings)
    except BaseException:
        await redis.aclose()
        raise
    return Connection(urls, redis, clock, store)


async def open_redis(
    settings: Settings, clock: Clock | None, *, need_database: bool
) -> tuple[ServiceUrls, aioredis.Redis, Clock]:
    """The servers resolved (embedded ones started when no URL is set), the pooled client and
    the clock (`clock`, else a SystemClock calibrated to the server's TIME): what a Scheduler
    and the partition migration, which opens no store, both connect with.

    Raises:
        StorageError: Redis cannot be reached (the client is closed again).
    """
    s = settings
    urls = await asyncio.to_thread(
        resolve_services,
        s.redis_url,
        s.database_url,
        data_dir_of(s),
        need_database=need_database,
        appendfsync=s.redis_appendfsync,
    )
    redis = redis_client(urls.redis_url, s)
    try:
        if clock is None:
            system = SystemClock()
            await system.calibrate(redis)
            clock = system
    except Exception as exc:
        await redis.aclose()
        error = ServerUnavailable if server_unavailable(exc) else StorageError
        raise error(
            scrub(f"cannot reach Redis at {urls.redis_url}: {exc}", urls.redis_url)
        ) from None
    return urls, redis, clock


async def _store(redis: aioredis.Redis, s: Settings) -> RedisStore:
    """The namespace's store over its partitions (one when unpartitioned), its count checked
    against the namespace's stored layout."""
    c = s.cluster
    store = RedisStore(
        redis,
        s.namespace,
        audit=s.audit.enabled,
        replicas=c.wait_replicas if c.durability == "replicated" else 0,
        replica_timeout_ms=c.wait_timeout_ms,
        partitions=c.partitions,
    )
    try:
        await store.check_layout()
    except BaseException:
        await store.aclose()
        raise
    return store
