"""What `horae worker` tries again at start (scheduler/cli/startup.py) and what it does not: only
a Redis that is away or not ready (store/base.py server_unavailable), only before the worker
runs, only within the wait."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

import pytest
from redis.exceptions import AuthenticationError, BusyLoadingError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from scheduler.cli import startup
from scheduler.core.errors import ServerUnavailable, StorageError
from scheduler.store.base import server_unavailable


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."), True),
        (RedisTimeoutError("Timeout reading from socket"), True),
        (ConnectionResetError(104, "Connection reset by peer"), True),
        (BusyLoadingError("Redis is loading the dataset in memory"), True),
        (ResponseError("LOADING Redis is loading the dataset in memory"), True),
        (ResponseError("MASTERDOWN Link with MASTER is down"), True),
        (ResponseError("CLUSTERDOWN The cluster is down"), True),
        (AuthenticationError("invalid username-password pair"), False),
        (ssl.SSLCertVerificationError(1, "certificate verify failed"), False),
        (RedisConnectionError("Error 1 connecting: [SSL: CERTIFICATE_VERIFY_FAILED]"), False),
        (ResponseError("WRONGPASS invalid username-password pair or user is disabled."), False),
        (ResponseError("NOPERM this user has no permissions to run the 'evalsha' command"), False),
        (ResponseError("ERR unknown command 'FCALL'"), False),
    ],
)
def test_only_a_redis_away_or_not_ready_is_worth_another_try(
    exc: BaseException, transient: bool
) -> None:
    assert server_unavailable(exc) is transient


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup, "FIRST_DELAY_S", 0.01)
    monkeypatch.setattr(startup, "MAX_DELAY_S", 0.02)


def serving(
    failures: list[BaseException], run_after: BaseException | None = None
) -> tuple[Callable[[Callable[[], None]], Awaitable[None]], list[int]]:
    """A serve() that raises `failures` one per call before it starts, then starts (and raises
    `run_after` once running, if given); the list counts its calls."""
    calls = [0]

    async def serve(started: Callable[[], None]) -> None:
        calls[0] += 1
        if failures:
            raise failures.pop(0)
        started()
        if run_after is not None:
            raise run_after

    return serve, calls


async def test_an_unavailable_redis_at_start_is_tried_again_until_it_serves() -> None:
    serve, calls = serving([ServerUnavailable("cannot reach Redis"), ServerUnavailable("LOADING")])
    await startup.serve_when_reachable(serve, 10.0, asyncio.Event())
    assert calls == [3]


async def test_the_wait_is_bounded_and_the_last_error_is_raised() -> None:
    errors: list[BaseException] = [ServerUnavailable(f"refused {i}") for i in range(10_000)]
    serve, calls = serving(errors)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ServerUnavailable, match="refused"):
        await startup.serve_when_reachable(serve, 0.2, asyncio.Event())
    assert 0.2 <= loop.time() - started < 2.0 and 2 <= calls[0] < 100


async def test_other_errors_are_raised_at_once() -> None:
    serve, calls = serving([StorageError("refused by the server's ACL")])
    with pytest.raises(StorageError, match="ACL"):
        await startup.serve_when_reachable(serve, 10.0, asyncio.Event())
    assert calls == [1]


async def test_once_running_a_lost_redis_is_not_a_start_to_try_again() -> None:
    serve, calls = serving([], run_after=ServerUnavailable("connection lost"))
    with pytest.raises(ServerUnavailable, match="connection lost"):
        await startup.serve_when_reachable(serve, 10.0, asyncio.Event())
    assert calls == [1]


async def test_a_stop_while_waiting_ends_it_without_serving() -> None:
    stop = asyncio.Event()
    errors: list[BaseException] = [ServerUnavailable("refused") for _ in range(10_000)]
    serve, calls = serving(errors)
    asyncio.get_running_loop().call_later(0.1, stop.set)
    await startup.serve_when_reachable(serve, 60.0, stop)
    assert 1 <= calls[0] < 100 and len(errors) > 0


async def test_a_stop_during_a_failing_start_ends_it_without_an_error() -> None:
    stop = asyncio.Event()

    async def serve(started: Callable[[], None]) -> None:
        stop.set()  # (SIGTERM while it connects)
        raise ServerUnavailable("refused")

    await startup.serve_when_reachable(serve, 60.0, stop)
