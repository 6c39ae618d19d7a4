"""The one Redis client factory (scheduler/store/clients.py): cluster or not from the URL and
`[cluster] enabled` alike, the pool size and the TLS options of the settings; and the one sync
client path of the status commands. Nothing connects here (clients connect on first use)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from horae.settings import Settings
from scheduler.core.config import ClusterSettings
from scheduler.store.clients import redis_client, sync_client, uses_cluster
from scheduler.store.cluster_url import parse_cluster_url

CLUSTER_ON = Settings(cluster=ClusterSettings(enabled=True), redis_max_connections=7)
CLUSTER_OFF = Settings(redis_max_connections=7)


@pytest.mark.parametrize(
    ("url", "settings", "cluster"),
    [
        ("redis://127.0.0.1:6379/0", CLUSTER_OFF, False),
        ("redis://127.0.0.1:6379/0", CLUSTER_ON, True),  # the audit CLI once missed this one
        ("rediss://h:6380", CLUSTER_ON, True),
        ("redis+cluster://h1:7000,h2:7001", CLUSTER_OFF, True),
        ("rediss+cluster://h1:7000", CLUSTER_OFF, True),
        ("", CLUSTER_ON, False),
    ],
)
def test_uses_cluster_from_the_url_or_the_setting(
    url: str, settings: Settings, cluster: bool
) -> None:
    assert uses_cluster(url, settings) is cluster


async def test_cluster_enabled_with_a_plain_url_gets_a_cluster_client() -> None:
    client: Any = redis_client("redis://:pw@127.0.0.1:6379", CLUSTER_ON)
    try:
        assert isinstance(client, RedisCluster)
        (seed,) = client.nodes_manager.startup_nodes.values()
        assert (seed.host, seed.port, seed.max_connections) == ("127.0.0.1", 6379, 7)
        assert seed.connection_kwargs["password"] == "pw"
    finally:
        await client.aclose()


async def test_a_standalone_url_gets_a_blocking_pool_of_the_configured_size() -> None:
    client = redis_client("rediss://127.0.0.1:6380/2?ssl_cert_reqs=none", CLUSTER_OFF)
    try:
        assert not isinstance(client, RedisCluster)
        pool = client.connection_pool
        assert isinstance(pool, aioredis.BlockingConnectionPool)
        assert pool.max_connections == 7
        assert pool.connection_kwargs["db"] == 2
        assert pool.connection_kwargs["ssl_cert_reqs"] == "none"  # the URL's TLS options
    finally:
        await client.aclose()


async def test_without_settings_the_defaults() -> None:
    client: Any = redis_client("redis://127.0.0.1:6379/0")
    try:
        assert client.connection_pool.max_connections == Settings().redis_max_connections
    finally:
        await client.aclose()


def test_sync_client_of_a_standalone_url_times_out_as_asked() -> None:
    with sync_client("redis://127.0.0.1:6379/3", timeout_s=1.5) as client:
        kwargs = client.connection_pool.connection_kwargs
        assert (kwargs["db"], kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (
            3,
            1.5,
            1.5,
        )


def test_sync_client_of_a_cluster_node_takes_the_urls_credentials_and_tls() -> None:
    url = "rediss+cluster://u:secret@h1:7000,h2:7001?ssl_cert_reqs=optional"
    for given in (url, parse_cluster_url(url)):
        with sync_client(given, node=("h3", 7002), timeout_s=2, retry=False, decode=True) as c:
            kwargs = c.connection_pool.connection_kwargs
            assert (kwargs["host"], kwargs["port"]) == ("h3", 7002)
            assert (kwargs["username"], kwargs["password"]) == ("u", "secret")
            assert kwargs["ssl_cert_reqs"] == "optional" and kwargs["decode_responses"]
            assert c.connection_pool.connection_class is redis.SSLConnection
            assert kwargs["retry"]._retries == 0
    with pytest.raises(ValueError, match="needs the node"):
        sync_client(parse_cluster_url(url), timeout_s=1)
