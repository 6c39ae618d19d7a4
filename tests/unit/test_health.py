"""scheduler/observe/health.py: the /healthz and /readyz server over a real socket, its readiness
checks (failures, timeouts, masked passwords), draining, and where it binds."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from scheduler.core.errors import ConfigError
from scheduler.observe.health import (
    HealthServer,
    bind_host,
    first_failure,
    in_container,
    worker_readiness,
)


async def _get(
    port: int, path: str, method: str = "GET"
) -> tuple[int, dict[str, str] | None, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, json.loads(body) if body else None, head


@pytest.fixture
async def server() -> AsyncIterator[HealthServer]:
    s = HealthServer("127.0.0.1", 0)
    await s.start()
    yield s
    await s.close()


async def test_healthz_answers_while_readyz_says_starting_until_a_check_is_set(
    server: HealthServer,
) -> None:
    assert (await _get(server.port, "/healthz"))[:2] == (200, {"status": "ok", "reason": ""})
    assert (await _get(server.port, "/readyz"))[:2] == (
        503,
        {"status": "unready", "reason": "starting"},
    )

    async def fine() -> str | None:
        return None

    server.ready = fine
    status, body, head = await _get(server.port, "/readyz?verbose=1")
    assert (status, body) == (200, {"status": "ready", "reason": ""})
    assert b"Content-Type: application/json" in head and b"Cache-Control: no-store" in head


async def test_drain_turns_readiness_503_for_good_and_liveness_stays_200(
    server: HealthServer,
) -> None:
    async def fine() -> str | None:
        return None

    server.ready = fine
    server.drain("draining after SIGTERM")
    server.drain("a later reason does not replace the first")
    assert (await _get(server.port, "/readyz"))[:2] == (
        503,
        {"status": "unready", "reason": "draining after SIGTERM"},
    )
    assert (await _get(server.port, "/healthz"))[0] == 200


async def test_other_paths_methods_and_garbage(server: HealthServer) -> None:
    assert (await _get(server.port, "/metrics"))[0] == 404
    assert (await _get(server.port, "/healthz", "POST"))[0] == 405
    status, body, _ = await _get(server.port, "/healthz", "HEAD")
    assert status == 200 and body is None
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"hello\r\n\r\n")
    await writer.drain()
    assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 400 ")
    writer.close()


async def test_a_taken_port_is_a_config_error_naming_address_and_option() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        s = HealthServer("127.0.0.1", port, option="--health-port ([worker] health_port)")
        with pytest.raises(
            ConfigError, match=rf"127\.0\.0\.1:{port} .*--health-port \(\[worker\] health_port\)"
        ):
            await s.start()


async def test_first_failure_names_the_check_masks_passwords_and_bounds_time() -> None:
    url = "redis://:s3cret@db:6379/0"

    async def ok() -> None:
        return None

    async def refused() -> None:
        raise ConnectionError(f"cannot reach {url}")

    async def hangs() -> None:
        await asyncio.sleep(30)

    async def says() -> str:
        return "not registered"

    assert await first_failure([("a", ok)]) is None
    reason = await first_failure([("a", ok), ("redis", refused), ("b", says)], [url])
    assert reason == "redis: ConnectionError: cannot reach redis://:***@db:6379/0"
    assert await first_failure([("b", says)]) == "b: not registered"
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert (
        await first_failure([("postgresql", hangs)], timeout_s=0.2)
        == "postgresql: no answer within 0.2s"
    )
    assert loop.time() - start < 2


async def test_worker_readiness_needs_redis_and_the_worker_in_the_registry() -> None:
    class Info:
        def __init__(self, id: str) -> None:
            self.id = id

    live: list[Info] = [Info("other")]
    down = False

    async def workers() -> list[Info]:
        if down:
            raise ConnectionError("Connection refused")
        return live

    check = worker_readiness(workers, "me")
    assert "worker me is not in the worker registry" in (await check() or "")
    live.append(Info("me"))
    assert await check() is None
    down = True
    assert await check() == "redis: ConnectionError: Connection refused"


def test_bind_host_is_loopback_outside_a_container_and_every_interface_inside(
    tmp_path: Path,
) -> None:
    marker = tmp_path / ".containerenv"
    none = (str(marker),)
    assert not in_container({}, none)
    assert bind_host("", {}, none) == "127.0.0.1"
    assert bind_host("", {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, none) == "0.0.0.0"
    assert bind_host("", {"container": "podman"}, none) == "0.0.0.0"
    marker.touch()
    assert bind_host("", {}, none) == "0.0.0.0"
    assert bind_host("10.1.2.3", {}, none) == "10.1.2.3"  # configured wins


async def test_a_readiness_check_that_raises_is_a_503_with_its_error(server: HealthServer) -> None:
    async def broken() -> str | None:
        raise RuntimeError("the check itself is broken")

    server.ready = broken
    assert (await _get(server.port, "/readyz"))[:2] == (
        503,
        {"status": "unready", "reason": "RuntimeError: the check itself is broken"},
    )
