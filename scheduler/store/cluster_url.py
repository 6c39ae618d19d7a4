"""Redis Cluster addresses: the `redis+cluster://` / `rediss+cluster://` URL (or `cluster = true`
with a plain `redis://` / `rediss://` URL) turned into seed nodes, credentials and TLS options,
and the redis-py cluster client built from them. Kept apart from the routing (cluster.py) so
config checks stay pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, TypeVar
from urllib.parse import parse_qsl, unquote

from scheduler.core.config import ClusterSettings
from scheduler.core.errors import ConfigError

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
_PLAIN_SCHEMES = ("redis", "rediss")
_TLS_SCHEMES = ("rediss+cluster", "rediss")
# The TLS options of a standalone rediss:// URL (redis-py's names) that a cluster URL takes too;
# one set of them applies to every node, the seeds and the nodes found later alike.
TLS_OPTIONS = (
    "ssl_ca_certs",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_cert_reqs",
    "ssl_check_hostname",
    "ssl_ciphers",
)
_CERT_REQS = ("none", "optional", "required")
_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def is_cluster_url(url: str | None) -> bool:
    """Whether the URL names a Redis Cluster by its scheme (redis+cluster://, rediss+cluster://)."""
    return bool(url) and str(url).split("://", 1)[0].lower() in CLUSTER_SCHEMES


@dataclass(frozen=True)
class ClusterAddress:
    """Seed nodes of a cluster, the credentials every node shares and, for rediss, the TLS
    options."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    tls_options: tuple[tuple[str, str | bool], ...] = ()

    def client_kwargs(self) -> dict[str, Any]:
        """redis-py's connection arguments for any node (credentials, and TLS: ssl=True and the
        URL's ssl_* options; verification stays redis-py's default: required, host name checked)."""
        kwargs: dict[str, Any] = {"username": self.username, "password": self.password}
        if self.tls:
            kwargs.update({"ssl": True, **dict(self.tls_options)})
        return kwargs


def parse_cluster_url(url: str) -> ClusterAddress:
    """`redis+cluster://[user:password@]host:port[,host:port...][?options]` (also a plain
    `redis://host:port` when the `cluster` setting is on) as seed nodes; `rediss+cluster://`
    (or `rediss://`) speaks TLS to every node with the options of TLS_OPTIONS.

    Raises:
        ConfigError: naming the URL part that is wrong and what is allowed.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in CLUSTER_SCHEMES + _PLAIN_SCHEMES:
        raise ConfigError(
            f"redis_url scheme {scheme!r}: a cluster needs "
            f"redis+cluster://host:port[,host:port...] "
            "or, with TLS, rediss+cluster://host:port[,host:port...]"
        )
    tls = scheme.lower() in _TLS_SCHEMES
    options = _tls_options(rest.partition("?")[2], tls)
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
            raise ConfigError(
                f"redis_url node {part.strip()!r}: each node must be host:port with a port 1..65535"
            )
        nodes.append((host.strip("[]"), int(port)))
    return ClusterAddress(tuple(nodes), username, password, tls, options)


def _tls_options(query: str, tls: bool) -> tuple[tuple[str, str | bool], ...]:
    """The URL query's TLS options, checked (partitions= is read by url_partitions).

    Raises:
        ConfigError: an unknown option, a TLS option without TLS, or a bad value.
    """
    found: list[tuple[str, str | bool]] = []
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name == "partitions":
            continue
        if name not in TLS_OPTIONS:
            raise ConfigError(
                f"redis_url option {name!r}: a cluster URL takes partitions=N and, with "
                f"rediss+cluster://, {', '.join(TLS_OPTIONS)}"
            )
        if not tls:
            raise ConfigError(
                f"redis_url option {name!r} is a TLS option: use rediss+cluster:// to speak TLS "
                "to the cluster"
            )
        if name == "ssl_cert_reqs" and value.lower() not in _CERT_REQS:
            raise ConfigError(
                f"redis_url ssl_cert_reqs={value!r}: must be one of {', '.join(_CERT_REQS)}"
            )
        if name == "ssl_check_hostname":
            if value.lower() not in _BOOLS:
                raise ConfigError(f"redis_url ssl_check_hostname={value!r}: must be true or false")
            found.append((name, _BOOLS[value.lower()]))
            continue
        found.append((name, value.lower() if name == "ssl_cert_reqs" else value))
    return tuple(found)


def url_partitions(url: str | None) -> int | None:
    """The `partitions=N` query of a redis+cluster:// (or rediss+cluster://) URL (the layout travels
    with the address, so every process given the URL agrees), or None.

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


class _Layout(Protocol):
    """What with_url_layout needs of a settings model (the root's: horae/settings.py)."""

    @property
    def redis_url(self) -> str | None: ...
    @property
    def cluster(self) -> ClusterSettings: ...
    def model_copy(
        self, *, update: Mapping[str, Any] | None = None, deep: bool = False
    ) -> Self: ...


S = TypeVar("S", bound=_Layout)


def with_url_layout(settings: S) -> S:
    """Settings whose [cluster] partitions is the URL's `partitions=` when it gives one.

    Raises:
        ConfigError: the URL and [cluster] partitions (not its default 1) disagree.
    """
    n = url_partitions(settings.redis_url)
    if n is None or n == settings.cluster.partitions:
        return settings
    if settings.cluster.partitions != 1:
        raise ConfigError(
            f"redis_url says partitions={n} but [cluster] "
            f"partitions={settings.cluster.partitions}: "
            "give the count in one place"
        )
    return settings.model_copy(
        update={"cluster": settings.cluster.model_copy(update={"partitions": n})}
    )
