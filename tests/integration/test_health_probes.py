"""/healthz and /readyz of the three long-running processes, as real processes: `horae worker
--health-port`, `horae audit relay --health-port` and `horae console` (its own port). A Redis
of the test's own (never the machine's shared one) stops: every readiness turns 503 within a
few seconds, liveness stays 200, and readiness comes back once Redis does. A SIGTERMed worker
with a running attempt is unready while it drains, then exits when the attempt finished."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO

import httpx
import psutil
import pytest
import redis.asyncio as aioredis

from scheduler.ops import servers
from scheduler.ops.servers import free_port as _free_port
from tests.procs import (
    HORAE,
    ROOT,
    WorkerProcesses,
    app_key,
    child_env,
    producer,
    stop_redis,
)
from tests.procs.worker_app import BLOCK_TOPIC

pytestmark = pytest.mark.slow


async def _probe(port: int, path: str) -> tuple[int, dict[str, str]] | None:
    """(status, JSON body) of GET path, or None when nothing answers."""
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            answer = await client.get(f"http://127.0.0.1:{port}{path}")
    except httpx.TransportError:
        return None
    return answer.status_code, answer.json()


async def _until(
    port: int, path: str, status: int, timeout: float, what: str
) -> tuple[float, dict[str, str]]:
    """Poll until `path` answers `status`: (seconds it took, the body)."""
    start = time.monotonic()
    last = None
    while time.monotonic() - start < timeout:
        last = await _probe(port, path)
        if last is not None and last[0] == status:
            return time.monotonic() - start, last[1]
        await asyncio.sleep(0.1)
    raise AssertionError(
        f"{what}: {path} on port {port} did not answer {status} within {timeout}s (last: {last})"
    )


class Proc:
    """A `horae ...` subprocess with its output in a log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.path = log_dir / f"{name}.log"
        self._file: IO[bytes] = open(self.path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [str(HORAE), *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._file,
            stderr=subprocess.STDOUT,
        )

    def log(self) -> str:
        self._file.flush()
        return self.path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._file.close()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A redis-server of this test's own (the embedded one, AOF on) under tmp_path."""
    root = tmp_path / "servers"
    url = servers.ensure_redis(root, "always")
    yield root, url
    servers.stop_all(root)


@pytest.fixture
async def migrated(database_url: str) -> AsyncIterator[str]:
    """The test's database with the audit schema (the relay writes into it)."""
    from audit.migrate import migrate_url

    await migrate_url(database_url)
    yield database_url


async def test_every_readiness_follows_redis_and_liveness_stays_up(
    own_redis: tuple[Path, str], migrated: str, namespace: str, tmp_path: Path
) -> None:
    root, redis_url = own_redis
    ports = {name: _free_port() for name in ("worker", "relay", "console", "metrics")}
    env = {
        **child_env(),
        "HORAE_REDIS_URL": redis_url,
        "HORAE_DATABASE_URL": migrated,
        "HORAE_NAMESPACE": namespace,
        "PYTHONUNBUFFERED": "1",
    }
    workers = WorkerProcesses(redis_url, namespace, tmp_path)
    worker = workers.spawn(
        "w",
        extra_args=(
            "--health-port",
            str(ports["worker"]),
            "--health-host",
            "127.0.0.1",
            "--metrics-port",
            str(ports["metrics"]),
            "--metrics-host",
            "127.0.0.1",
        ),
    )
    relay = Proc("relay", ["audit", "relay", "--health-port", str(ports["relay"])], env, tmp_path)
    # A console with tokens: the probes need none (the kubelet carries none).
    console = Proc(
        "console",
        ["console", "--port", str(ports["console"])],
        {**env, "HORAE_CONSOLE__VIEWER_TOKEN": "v-token"},
        tmp_path,
    )
    try:
        for name in ("worker", "relay", "console"):
            await _until(ports[name], "/readyz", 200, 60, f"{name} ready at start")
            assert await _probe(ports[name], "/healthz") == (200, {"status": "ok", "reason": ""}), (
                name
            )
        async with (
            httpx.AsyncClient() as client
        ):  # ... while everything else of the console needs one
            assert (
                await client.get(f"http://127.0.0.1:{ports['console']}/api/v1/stats")
            ).status_code == 401
        # Both ports of the worker listen where they were told, not on every interface.
        listening = {
            c.laddr
            for c in psutil.Process(worker.pid).net_connections("tcp")
            if c.status == "LISTEN"
        }
        assert {("127.0.0.1", ports["worker"]), ("127.0.0.1", ports["metrics"])} <= listening, (
            listening
        )

        stop_redis(root)  # SIGTERM: the AOF is complete, the worker's registry entry survives
        for name in ("worker", "relay", "console"):
            took, body = await _until(
                ports[name], "/readyz", 503, 8, f"{name} unready without Redis"
            )
            assert (
                took < 6 and body["status"] == "unready" and body["reason"].startswith("redis: ")
            ), (name, body)
            assert await _probe(ports[name], "/healthz") == (200, {"status": "ok", "reason": ""}), (
                name
            )

        assert servers.ensure_redis(root, "always") == redis_url  # the same port again
        for name in ("worker", "relay", "console"):
            took, body = await _until(
                ports[name], "/readyz", 200, 20, f"{name} ready after Redis came back"
            )
            assert body == {"status": "ready", "reason": ""}, (name, body)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\n{workers.logs()}\n--- relay:\n{relay.log()}\n--- console:\n{console.log()}"
        ) from None
    finally:
        workers.close()
        relay.stop()
        console.stop()


async def test_a_sigtermed_worker_is_unready_while_its_running_attempt_drains(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    port = _free_port()
    workers = WorkerProcesses(redis_url, namespace, tmp_path)
    worker = workers.spawn("drain", grace=30, extra_args=("--health-port", str(port)))
    events = app_key(namespace, "events")
    client = aioredis.Redis.from_url(redis_url)
    try:
        await worker.wait_ready()
        await _until(port, "/readyz", 200, 30, "ready")
        async with producer(redis_url, namespace) as s:
            job_id = await s.schedule_in(BLOCK_TOPIC, 0, payload={"block": [1], "sleep": 4})
        deadline = time.monotonic() + 15
        while not [
            e for e in await client.lrange(events, 0, -1) if json.loads(e)["what"] == "start"
        ]:
            assert time.monotonic() < deadline, "the attempt did not start"
            await asyncio.sleep(0.05)

        worker.signal(signal.SIGTERM)
        took, body = await _until(port, "/readyz", 503, 2, "unready on SIGTERM")
        assert body == {"status": "unready", "reason": "draining after SIGTERM"}, body
        assert worker.proc.poll() is None  # ... before the drain finished: the attempt still runs
        assert not [
            e for e in await client.lrange(events, 0, -1) if json.loads(e)["what"] == "finish"
        ]
        assert await _probe(port, "/healthz") == (
            200,
            {"status": "ok", "reason": ""},
        )  # not restarted meanwhile
        code, waited = await worker.wait_exit(25)
        assert code == 0, worker.describe()
        finished = [
            json.loads(e)
            for e in await client.lrange(events, 0, -1)
            if json.loads(e)["what"] == "finish"
        ]
        assert [e["job"] for e in finished] == [job_id]  # the drain let it finish within grace
        assert await _probe(port, "/readyz") is None  # gone with the process
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{workers.logs()}") from None
    finally:
        await client.aclose()
        workers.close()


async def test_relay_and_console_readiness_name_the_dependency_that_fails(
    redis_url: str, server_dsn: str
) -> None:
    """audit/health.readiness (the relay's /readyz and the console's): PostgreSQL or Redis not
    answering is the reason, with the URL's password masked; a stopped relay is unready."""
    from audit.health import readiness

    closed = _free_port()  # nothing listens there
    redis = aioredis.Redis.from_url(redis_url)
    dead_redis = aioredis.Redis.from_url(f"redis://:hush@127.0.0.1:{closed}/0")
    try:
        assert await readiness(redis, server_dsn)() is None
        pg_down = await readiness(redis, f"postgresql://postgres:hush@127.0.0.1:{closed}/x")()
        assert (
            pg_down is not None and pg_down.startswith("postgresql: ") and "hush" not in pg_down
        ), pg_down
        redis_down = await readiness(
            dead_redis, server_dsn, redis_url=f"redis://:hush@127.0.0.1:{closed}/0"
        )()
        assert (
            redis_down is not None and redis_down.startswith("redis: ") and "hush" not in redis_down
        )
        assert await readiness(redis, None)() is None  # (a console without the audit: Redis only)
        assert (
            await readiness(redis, server_dsn, running=lambda: False)()
            == "audit relay: not running"
        )
    finally:
        await redis.aclose()
        await dead_redis.aclose()
