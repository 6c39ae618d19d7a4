"""The one place a Redis client is made: `redis_client` (asyncio, pooled: the Scheduler's
connect, the relay and its child process, `horae audit`, the partition migration, the console
through its Scheduler) and `sync_client` (short-lived, for the CLI's status commands). Both
decide cluster or not the same way (`uses_cluster`) and take the URL's TLS options."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import redis.asyncio as aioredis

from scheduler.core.config import ClusterSettings, ConnectionSettings
from scheduler.store.cluster_url import ClusterAddress, is_cluster_url, parse_cluster_url

if TYPE_CHECKING:
    import redis

POOL_TIMEOUT_S = 30  # a caller waits this long for a free pooled connection, then fails


@runtime_checkable
class ClientSettings(Protocol):
    """What a client is made from besides its URL (the root Settings has both)."""

    @property
    def redis_max_connections(self) -> int: ...
    @property
    def cluster(self) -> ClusterSettings: ...


class _Defaults:
    """ClientSettings of the defaults, for a caller that has a URL only."""

    @property
    def redis_max_connections(self) -> int:
        return ConnectionSettings().redis_max_connections

    @property
    def cluster(self) -> ClusterSettings:
        return ClusterSettings()


def uses_cluster(url: str | None, settings: ClientSettings) -> bool:
    """Whether `url` is a Redis Cluster's: a redis(s)+cluster:// URL, or `[cluster] enabled`
    with a plain redis(s):// URL naming seed nodes."""
    return bool(url) and (is_cluster_url(url) or settings.cluster.enabled)


def redis_client(url: str, settings: ClientSettings | None = None) -> aioredis.Redis:
    """redis-py's asyncio client of `url` as every process of the namespace opens it: for a
    cluster (uses_cluster) a RedisCluster whose every node (seeds, and nodes learnt from the
    slot map or a MOVED/ASK) is verified with the URL's TLS options; else a blocking pool of
    `redis_max_connections`, which waits for a free connection instead of failing past its
    size (rediss:// options: redis-py's own). Closing the client closes its pool. Without
    `settings`: the defaults."""
    settings = _Defaults() if settings is None else settings
    if uses_cluster(url, settings):
        from redis.asyncio.cluster import ClusterNode, RedisCluster

        address = parse_cluster_url(url)
        # redis-py types the two apart; every caller uses what they share.
        return RedisCluster(  # type: ignore[return-value]
            startup_nodes=[ClusterNode(h, p) for h, p in address.nodes],
            max_connections=settings.redis_max_connections,
            **address.client_kwargs(),
        )
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=settings.redis_max_connections, timeout=POOL_TIMEOUT_S
    )
    return aioredis.Redis.from_pool(pool)  # owns the pool: aclose() closes it


def sync_client(
    url: str | ClusterAddress,
    *,
    timeout_s: float,
    node: tuple[str, int] | None = None,
    retry: bool = True,
    decode: bool = False,
) -> redis.Redis:
    """A short-lived synchronous client for the CLI's status commands (`horae services status`):
    the server of a standalone URL, or with `node`, that one node of the cluster `url` names,
    with the cluster URL's credentials and TLS options. Connect and reads time out after
    `timeout_s`; retry=False: a dead server is reported at once, not after redis-py's backoff."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    options: dict[str, Any] = {
        "socket_connect_timeout": timeout_s,
        "socket_timeout": timeout_s,
    }
    if not retry:
        options["retry"] = Retry(NoBackoff(), 0)
    if decode:
        options["decode_responses"] = True
    if node is None:
        if isinstance(url, ClusterAddress):
            raise ValueError("a cluster address needs the node to connect to")
        return redis.Redis.from_url(url, **options)
    address = url if isinstance(url, ClusterAddress) else parse_cluster_url(url)
    return redis.Redis(host=node[0], port=node[1], **options, **address.client_kwargs())
