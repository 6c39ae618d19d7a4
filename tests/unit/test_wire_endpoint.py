"""Where scheduler/store/wire.py connects: the address, TLS, credentials and database
of a Redis URL, read off a redis-py pool without connecting."""

from __future__ import annotations

import ssl

import redis.asyncio as aioredis

from scheduler.store.pipe import Endpoint, as_map


def endpoint(url: str) -> Endpoint:
    return Endpoint.of_pool(aioredis.ConnectionPool.from_url(url))


def test_tls_with_a_user_and_password() -> None:
    e = endpoint("rediss://app:s%40cret@cache.example:6390/4")
    assert (e.host, e.port, e.path, e.username, e.password, e.db) == (
        "cache.example",
        6390,
        None,
        "app",
        "s@cret",
        4,
    )
    assert isinstance(e.ssl, ssl.SSLContext)
    assert e.handshake() == [("AUTH", "app", "s@cret"), ("SELECT", 4)]


def test_plain_tcp_with_a_password_only() -> None:
    e = endpoint("redis://:pw@10.0.0.5/0")
    assert (e.host, e.port, e.ssl, e.username, e.password, e.db) == (
        "10.0.0.5",
        6379,
        None,
        None,
        "pw",
        0,
    )
    assert e.handshake() == [("AUTH", "pw")]


def test_no_credentials_no_handshake() -> None:
    assert endpoint("redis://127.0.0.1:6379").handshake() == []


def test_a_unix_socket() -> None:
    e = endpoint("unix:///run/redis.sock?db=2")
    assert (e.path, e.db, e.password) == ("/run/redis.sock", 2, None)
    assert e.handshake() == [("SELECT", 2)]


def test_a_flat_map_reply() -> None:
    assert as_map(["a", "1", "b", None]) == {"a": "1", "b": None}
    assert as_map([]) == as_map(None) == {}
