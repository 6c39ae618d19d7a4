"""Redis Cluster addresses: the `redis+cluster://` URL (or `cluster = true` with a plain
`redis://` URL) turned into seed nodes and credentials, and the redis-py cluster client
built from them. Kept apart from the routing (cluster.py) so config checks stay pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from scheduler.errors import ConfigError

if TYPE_CHECKING:
    from scheduler.config import Settings

CLUSTER_SCHEMES = ("redis+cluster",)
_PLAIN_SCHEMES = ("redis",)


def is_cluster_url(url: str | None) -> bool:
    """Whether the URL names a Redis Cluster by its scheme (redis+cluster://)."""
    return bool(url) and str(url).split("://", 1)[0].lower() in CLUSTER_SCHEMES


@dataclass(frozen=True)
class ClusterAddress:
    """Seed nodes of a cluster and the credentials every node shares."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = field(default=None, repr=False)


def parse_cluster_url(url: str) -> ClusterAddress:
    """`redis+cluster://[user:password@]host:port[,host:port...]` (also a plain `redis://host:port`
    when the `cluster` setting is on) as seed nodes.

    Raises:
        ConfigError: naming the URL part that is wrong and what is allowed.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in CLUSTER_SCHEMES + _PLAIN_SCHEMES:
        raise ConfigError(f"redis_url scheme {scheme!r}: a cluster needs redis+cluster://host:port[,host:port...] "
                          "(rediss+cluster, TLS to a cluster, is not supported)")
    rest = rest.split("/", 1)[0].split("?", 1)[0]
    userinfo, at, hosts = rest.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None if colon else None
        password = unquote(secret) if colon else unquote(user)
    nodes: list[tuple[str, int]] = []
    for part in hosts.split(","):
        host, colon, port = part.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"redis_url node {part.strip()!r}: each node must be host:port with a port 1..65535")
        nodes.append((host.strip("[]"), int(port)))
    return ClusterAddress(tuple(nodes), username, password)


def cluster_client(url: str, max_connections: int) -> object:
    """The redis-py asyncio cluster client for the URL (its slot map: redis-py's own)."""
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    address = parse_cluster_url(url)
    return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in address.nodes],
                        username=address.username, password=address.password,
                        max_connections=max_connections)


def url_partitions(url: str | None) -> int | None:
    """The `partitions=N` query of a redis+cluster:// URL (the layout travels with the address,
    so every process given the URL agrees), or None.

    Raises:
        ConfigError: a value that is not a whole number 1..1024.
    """
    if not is_cluster_url(url):
        return None
    for pair in str(url).partition("?")[2].split("&"):
        name, _, value = pair.partition("=")
        if name == "partitions":
            if not value.isdigit() or not 1 <= int(value) <= 1024:
                raise ConfigError(f"redis_url partitions={value!r}: must be a whole number 1..1024")
            return int(value)
    return None


def with_url_layout(settings: Settings) -> Settings:
    """Settings whose [cluster] partitions is the URL's `partitions=` when it gives one.

    Raises:
        ConfigError: the URL and [cluster] partitions (not its default 1) disagree.
    """
    n = url_partitions(settings.redis_url)
    if n is None or n == settings.cluster.partitions:
        return settings
    if settings.cluster.partitions != 1:
        raise ConfigError(f"redis_url says partitions={n} but [cluster] partitions={settings.cluster.partitions}: "
                          "give the count in one place")
    return settings.model_copy(update={"cluster": settings.cluster.model_copy(update={"partitions": n})})


def redis_client(url: str, max_connections: int = 64) -> Any:
    """redis-py's asyncio client for any horae Redis URL (a RedisCluster for redis+cluster://)."""
    if is_cluster_url(url):
        return cluster_client(url, max_connections)
    import redis.asyncio as aioredis

    return aioredis.Redis.from_url(url)
