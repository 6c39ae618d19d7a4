"""The pipelined connection and the wake-up subscription (scheduler/store/wire.py) on a
real Redis: replies reach the right callers (as text or bytes, as asked), errors
and broken connections fail exactly the calls they concern, and the handshake
honours the URL."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from scheduler.ops.servers import _redis_binary
from scheduler.store.pipe import Endpoint, as_map
from scheduler.store.wire import Subscription, WireConnection
from tests.integration.engine_fixtures import eventually


@pytest.fixture
async def wire(redis: aioredis.Redis) -> AsyncIterator[WireConnection]:
    conn = WireConnection(Endpoint.of_pool(redis.connection_pool))
    yield conn
    await conn.aclose()


def key(namespace: str, name: str) -> str:
    return "{" + namespace + "}:" + name


async def kill_addr(redis: aioredis.Redis, sockname: tuple[str, int]) -> None:
    """CLIENT KILL the connection whose client end is `sockname` (the server closes it)."""
    assert await redis.client_kill_filter(addr=f"{sockname[0]}:{sockname[1]}") == 1


async def test_concurrent_calls_each_get_their_own_reply_in_one_pipeline(
    wire: WireConnection, namespace: str
) -> None:
    k = key(namespace, "n")
    replies = await asyncio.gather(*(wire.call("INCR", k) for _ in range(500)))
    assert sorted(replies) == list(range(1, 501))
    assert replies == list(range(1, 501)), "written in call order, answered in order"
    values = await asyncio.gather(*(wire.call("ECHO", f"v{i}") for i in range(200)))
    assert values == [f"v{i}".encode() for i in range(200)]


async def test_an_error_reply_fails_only_its_own_call(wire: WireConnection, namespace: str) -> None:
    k = key(namespace, "h")
    await wire.call("HSET", k, "f", "v")
    ok, bad, after = await asyncio.gather(
        wire.call("HGET", k, "f"),
        wire.call("INCR", k),
        wire.call("HGET", k, "f"),
        return_exceptions=True,
    )
    assert ok == after == b"v"
    assert isinstance(bad, ResponseError) and "WRONGTYPE" in str(bad)


async def test_evalsha_loads_a_script_redis_does_not_have(
    wire: WireConnection, redis: aioredis.Redis
) -> None:
    source = f"return {{ARGV[1], '{uuid.uuid4().hex}'}}"  # a script no earlier run loaded
    sha = hashlib.sha1(source.encode()).hexdigest()
    assert await redis.script_exists(sha) == [False]
    assert (await wire.evalsha(sha, source, [], ["x"]))[0] == b"x"
    assert await redis.script_exists(sha) == [True]
    failing = "return redis.error_reply('boom')"
    with pytest.raises(ResponseError, match="boom"):
        await wire.evalsha(hashlib.sha1(failing.encode()).hexdigest(), failing, [], [])


async def test_a_broken_connection_fails_the_calls_in_flight_and_the_next_call_reconnects(
    wire: WireConnection, redis: aioredis.Redis, namespace: str
) -> None:
    await wire.call("CLIENT", "SETNAME", "doomed")
    sockname = wire._pipe.transport.get_extra_info("sockname")  # type: ignore[union-attr]
    # (a blocking command only to hold a call in flight: the engine never sends one on this
    # connection)
    blocked = asyncio.ensure_future(wire.call("BLPOP", key(namespace, "never"), 10))
    await asyncio.sleep(0.2)
    await kill_addr(redis, sockname)
    with pytest.raises(RedisConnectionError):
        await blocked
    assert await wire.call("SET", key(namespace, "after"), "1") == b"OK"
    assert (await wire.call("CLIENT", "GETNAME")) is None, "a new connection"


async def test_a_cancelled_caller_does_not_shift_the_replies(
    wire: WireConnection, namespace: str
) -> None:
    slow = asyncio.ensure_future(wire.call("ECHO", "first"))
    slow.cancel()
    assert await wire.call("ECHO", "second") == b"second"
    assert await asyncio.gather(slow, return_exceptions=True) != [b"second"]


async def test_a_decoding_connection_gives_text_and_bytes_to_a_caller_that_asks(
    redis: aioredis.Redis, namespace: str
) -> None:
    conn = WireConnection(Endpoint.of_pool(redis.connection_pool), decode=True)
    k, e = key(namespace, "h"), "é".encode()
    try:
        await conn.call("HSET", k, "a", e[:1], "b", e[1:], "c", "é")
        # one write; a raw reply between decoded ones, and an error that fails nothing else
        replies = conn.call_many(
            [("HGET", k, "c"), ("HMGET", k, "a", "b"), ("INCR", k), ("HGETALL", k)],
            raw=[False, True],
        )
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await replies
        text, parts, _, flat = await conn.call_many(
            [("HGET", k, "c"), ("HMGET", k, "a", "b"), ("HGET", k, "a"), ("HGETALL", k)],
            raw=[False, True],
        )
        assert (text, b"".join(parts).decode()) == ("é", "é"), "bytes joined before decoding"
        assert as_map(flat)["c"] == "é" and as_map(flat)["a"] == "\ufffd", "invalid UTF-8 replaced"
        assert (
            await conn.call("ECHO", "x") == "x" and await conn.call("ECHO", "x", raw=True) == b"x"
        )
        assert await conn.call_many([]) == []
    finally:
        await conn.aclose()


async def test_the_url_database_is_selected(redis_url: str, namespace: str) -> None:
    db3 = aioredis.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/3")
    k = key(namespace, "db3")
    conn = WireConnection(Endpoint.of_pool(db3.connection_pool))
    try:
        assert conn.endpoint.db == 3
        await conn.call("SET", k, "here")
        assert await db3.get(k) == b"here"
    finally:
        await db3.delete(k)
        await conn.aclose()
        await db3.aclose()


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[Path]:
    """A private redis-server on a unix socket with a password (the embedded binary)."""
    sock = tmp_path / "r.sock"
    proc = subprocess.Popen(
        [
            str(_redis_binary()),
            "--port",
            "0",
            "--unixsocket",
            str(sock),
            "--save",
            "",
            "--appendonly",
            "no",
            "--requirepass",
            "s3cret",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(sock)
        yield sock
    finally:
        proc.terminate()
        proc.wait(10)


def _wait_listening(path: Path, timeout_s: float = 10.0) -> None:
    """Until the server accepts on its socket: the file appears at bind(), a moment before
    listen(), and a connect in between is refused (seen on a loaded machine)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.socket(socket.AF_UNIX) as probe:
                probe.connect(str(path))
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


async def test_a_unix_socket_with_a_password(private_server: Path) -> None:
    client = aioredis.Redis.from_url(f"unix://:s3cret@{private_server}?db=2")
    conn = WireConnection(Endpoint.of_pool(client.connection_pool))
    try:
        assert (conn.endpoint.path, conn.endpoint.db) == (str(private_server), 2)
        await conn.call("SET", "k", "v")
        assert await client.get("k") == b"v"
        wrong = WireConnection(Endpoint(path=str(private_server), password="nope"))
        with pytest.raises(ResponseError):
            await wrong.call("PING")
        await wrong.aclose()
    finally:
        await conn.aclose()
        await client.aclose()


async def test_subscription_delivers_messages_and_reports_a_lost_connection(
    redis: aioredis.Redis, namespace: str
) -> None:
    channel = key(namespace, "wake")
    seen: list[tuple[bytes | None, bytes | None]] = []
    sub = Subscription(
        Endpoint.of_pool(redis.connection_pool), [channel], lambda c, d: seen.append((c, d))
    )
    await sub.start()
    try:
        assert await redis.publish(channel, "1") == 1
        await eventually(lambda: _true(seen == [(channel.encode(), b"1")]), what="the message")
        await kill_addr(redis, sub._pipe.transport.get_extra_info("sockname"))  # type: ignore[union-attr]
        await eventually(lambda: _true((None, None) in seen), what="the lost connection reported")
        await eventually(lambda: _published(redis, channel), what="resubscribed")
        await eventually(
            lambda: _true(seen[-1] == (channel.encode(), b"2")), what="a message after"
        )
    finally:
        await sub.aclose()
    # (the server drops the subscriber when it reads the close: a moment after aclose returns)
    await eventually(lambda: _nobody_listens(redis, channel), what="closed: nobody listens")


async def _true(value: bool) -> bool:
    return value


async def _published(redis: aioredis.Redis, channel: str) -> bool:
    return bool(await redis.publish(channel, "2"))


async def _nobody_listens(redis: aioredis.Redis, channel: str) -> bool:
    return await redis.publish(channel, "3") == 0
