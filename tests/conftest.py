"""Shared fixtures: one real Redis and one real PostgreSQL per test run (the
machine's when HORAE_REDIS_URL / HORAE_DATABASE_URL are set, else embedded
servers under .horae/), and per-test isolation by namespace and database."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT / ".horae"

# The servers to test against are read once and removed from the environment, so
# nothing in a test can build a Scheduler from them by accident and write into the
# machine's shared database: tests get URLs only through the fixtures below.
_SERVER_URLS = {
    name: os.environ.pop(name, "") for name in ("HORAE_REDIS_URL", "HORAE_DATABASE_URL")
}
# Code under test that finds its own servers (the CLI, subprocess workers) uses the run's
# data directory, never the user's per-user one (README: Configuration).
os.environ.setdefault("HORAE_DATA_DIR", str(DATA_DIR))


@pytest.fixture(scope="session")
def services() -> Iterator[object]:
    """Resolve (and start when needed) the servers used by this run."""
    from scheduler.ops.servers import resolve_services

    yield resolve_services(
        _SERVER_URLS["HORAE_REDIS_URL"] or None,
        _SERVER_URLS["HORAE_DATABASE_URL"] or None,
        DATA_DIR,
    )


@pytest.fixture(scope="session")
def redis_url(services: object) -> str:
    return services.redis_url  # type: ignore[attr-defined, no-any-return]


@pytest.fixture(scope="session")
def server_dsn(services: object) -> str:
    """DSN of the server's own database; tests create their own databases from it."""
    return services.database_url  # type: ignore[attr-defined, no-any-return]


@pytest.fixture
def namespace(redis_url: str) -> Iterator[str]:
    """A namespace no other test uses; its keys are deleted afterwards."""
    ns = f"t-{uuid.uuid4().hex[:12]}"
    yield ns
    delete_namespace_keys(redis_url, ns)


def delete_namespace_keys(redis_url: str, namespace: str) -> None:
    """Delete every key of `namespace` (its `{ns}:` hash tag, and its partitions' `{ns|p}:`),
    in batches."""
    import redis as sync_redis

    client = sync_redis.Redis.from_url(redis_url)
    try:
        keys = [
            key
            for pattern in ("{" + namespace + "}:*", "{" + namespace + "|*}:*")
            for key in client.scan_iter(match=pattern, count=1000)
        ]
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    finally:
        client.close()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


def with_database(dsn: str, name: str) -> str:
    """The same DSN pointing at another database (keeps a unix-socket host query)."""
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@asynccontextmanager
async def own_database(server_dsn: str) -> AsyncIterator[str]:
    """A fresh, empty database (its DSN), dropped on leaving."""
    name = f"horae_t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield with_database(server_dsn, name)
    finally:
        admin = await asyncpg.connect(server_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@pytest.fixture
async def database_url(server_dsn: str) -> AsyncIterator[str]:
    """A fresh, empty database of this test's own, dropped afterwards."""
    async with own_database(server_dsn) as url:
        yield url


@pytest.fixture
def horae_settings(redis_url: str, server_dsn: str) -> object:
    """The pytest plugin's settings (its `horae` fixture), on this run's servers: no config
    file, no environment (the HORAE_* URLs were removed above so nothing else reaches them)."""
    from horae.settings import load_settings
    from scheduler.testing.plugin import for_tests

    return for_tests(load_settings(path=None, env={}, redis_url=redis_url, database_url=server_dsn))
