"""Connecting a Scheduler to Redis: resolve the servers (starting embedded ones when no
URL is set), open the pooled client, calibrate the clock to the server, make the store."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis.asyncio as aioredis

from scheduler.core.clock import Clock, SystemClock
from scheduler.core.config import Settings
from scheduler.core.datadir import data_dir_of
from scheduler.core.errors import StorageError
from scheduler.core.procutil import scrub
from scheduler.store.cluster_url import cluster_client, is_cluster_url
from scheduler.store.partitioned import PartitionedStore
from scheduler.store.partitions import MIGRATION_FIELDS, layout_error, migration_error
from scheduler.store.redis import RedisStore

if TYPE_CHECKING:
    from scheduler.ops.servers import ServiceUrls


@dataclass(frozen=True)
class Connection:
    """What connect() keeps: the resolved URLs, the client (owning its pool), the clock, the
    store."""

    services: ServiceUrls
    redis: aioredis.Redis
    clock: Clock
    store: RedisStore | PartitionedStore


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
    from scheduler.ops.servers import resolve_services

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
        raise StorageError(
            scrub(f"cannot reach Redis at {urls.redis_url}: {exc}", urls.redis_url)
        ) from None
    try:
        store = await _store(redis, s)
    except BaseException:
        await redis.aclose()
        raise
    return Connection(urls, redis, clock, store)


async def _store(redis: aioredis.Redis, s: Settings) -> RedisStore | PartitionedStore:
    """The namespace's store: one RedisStore, or one per partition behind a PartitionedStore;
    either way the count is checked against the namespace's stored layout."""
    c = s.cluster
    replicas = c.wait_replicas if c.durability == "replicated" else 0
    if c.partitions > 1:
        parted = PartitionedStore(
            redis,
            s.namespace,
            c.partitions,
            audit=s.audit.enabled,
            replicas=replicas,
            replica_timeout_ms=c.wait_timeout_ms,
        )
        try:
            await parted.check_layout()
        except BaseException:
            await parted.aclose()
            raise
        return parted
    store = RedisStore(
        redis,
        s.namespace,
        audit=s.audit.enabled,
        replicas=replicas,
        replica_timeout_ms=c.wait_timeout_ms,
    )
    try:
        stored, *migration = await store.wire.call(
            "HMGET", store.keys.meta, "partitions", *MIGRATION_FIELDS
        )
    except Exception:  # noqa: BLE001
        # Not readable (no such ACL right, TLS refused, a blip): the caller's first call meets
        # the same error and says it as it always did (naming the ACL keys, the CA to give);
        # a namespace whose layout cannot be read cannot be used either.
        return store
    if migration[1] is not None:
        await store.aclose()
        raise migration_error(s.namespace, migration)
    if stored is not None and int(stored) != 1:
        await store.aclose()
        raise layout_error(s.namespace, int(stored), 1)
    return store


def redis_client(url: str, s: Settings) -> aioredis.Redis:
    """redis-py's client of `url` as every process of the namespace opens it (also those that
    connect without a store: the partition migration, a worker's relay process): a RedisCluster
    for a cluster (redis+cluster:// or cluster.enabled), else a blocking pool, which waits for a
    free connection instead of failing past its size."""
    if is_cluster_url(url) or s.cluster.enabled:
        return cluster_client(url, s.redis_max_connections)  # type: ignore[return-value]
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=s.redis_max_connections, timeout=30
    )
    return aioredis.Redis.from_pool(pool)  # owns the pool: aclose() closes it
