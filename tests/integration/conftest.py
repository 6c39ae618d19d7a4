"""Fixtures of the audit integration tests: the outbox writer of
tests/audit_outbox.py, a relay with small timeouts, and a connection to the
test's own database."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest
import redis.asyncio as aioredis

from audit.options import RelayOptions
from audit.relay.consumer import AuditRelay
from audit.settings import AuditSettings
from tests.audit_outbox import Outbox


@pytest.fixture
def outbox(redis: aioredis.Redis, namespace: str) -> Outbox:
    return Outbox(redis, namespace)


@pytest.fixture
def relay_options() -> RelayOptions:
    """Small timeouts so claims, retries and drains happen within a test."""
    # claim_idle_ms leaves room for a loaded 2-core machine between a read and the "not idle yet"
    # check.
    return RelayOptions.from_settings(
        AuditSettings(),
        block_ms=50,
        claim_idle_ms=800,
        retry_initial_s=0.02,
        retry_max_s=0.2,
        trim_interval_s=0.1,
        trim_approximate=False,
        drain_timeout_s=5.0,
        connect_timeout_s=2.0,
        command_timeout_s=10.0,
    )


@pytest.fixture
async def relay(
    redis: aioredis.Redis, namespace: str, database_url: str, relay_options: RelayOptions
) -> AsyncIterator[AuditRelay]:
    relay = AuditRelay(redis, namespace, database_url, relay_options)
    yield relay
    await relay.stop()


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url)
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    yield conn
    await conn.close()


async def _drain(relay: AuditRelay) -> int:
    total = 0
    while n := await relay.step():
        total += n
    return total


@pytest.fixture
def drain() -> Callable[[AuditRelay], Awaitable[int]]:
    """`await drain(relay)`: the relay's own loop step (read, commit, ack, trim) until a
    step finds nothing within block_ms; returns the entries settled. The relay must not be
    started."""
    return _drain
