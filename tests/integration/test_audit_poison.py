"""A poison event cannot stall the audit (issue 16): PostgreSQL refuses a job's events for
good (a max_attempts beyond its integer column; a NUL, the original poison, is now stored
as U+FFFD: audit/jsontext.py), the relay writes the rest of the batch job by job, parks the
refused events in `<outbox>:parked` with the error, counts and logs them once, and goes on
with later batches."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis

from audit.relay import consumer as relay_module
from audit.relay.consumer import AuditRelay
from tests.audit_outbox import Outbox


class Count:
    def __init__(self) -> None:
        self.n = 0

    def add(self, n: int) -> None:
        self.n += n


async def test_a_poison_event_is_parked_and_the_relay_goes_on(
    outbox: Outbox,
    relay: AuditRelay,
    db: asyncpg.Connection,
    redis: aioredis.Redis,
    drain: Callable[[AuditRelay], Awaitable[int]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    parked = Count()
    monkeypatch.setattr(relay_module, "_parked_counter", lambda: parked)
    await outbox.scheduled("good-1")
    poison = await outbox.scheduled("bad", max_attempts=10**12)
    await outbox.scheduled("good-2")
    assert await drain(relay) == 3
    rows = {r["id"] for r in await db.fetch("SELECT id FROM schedule_audit")}
    assert rows == {"good-1", "good-2"}
    entries = await redis.xrange(f"{relay.stream.key}:parked")
    assert len(entries) == 1 and parked.n == 1
    fields: dict[str, Any] = {k.decode(): v.decode() for k, v in entries[0][1].items()}
    assert fields["id"] == "bad" and fields["parked_id"] == poison
    assert "out of range" in fields["parked_error"]
    warned = [r for r in caplog.records if getattr(r, "event", "") == "audit.events_parked"]
    assert len(warned) == 1 and "bad" in warned[0].getMessage()
    # Later batches are not held up: the outbox is fully acknowledged and moves on.
    await outbox.scheduled("good-3")
    assert await drain(relay) == 1
    assert await db.fetchval("SELECT count(*) FROM schedule_audit WHERE id = 'good-3'") == 1
    assert await relay.lag() == (0, None)


async def test_a_dead_relays_entries_are_taken_over_at_once(
    outbox: Outbox,
    redis: aioredis.Redis,
    namespace: str,
    database_url: str,
    db: asyncpg.Connection,
    drain: Callable[[AuditRelay], Awaitable[int]],
) -> None:
    """A relay of this host whose process is gone (SIGKILL) leaves a batch read but not
    acknowledged: another relay writes it within a claim check, not after claim_idle_ms."""
    import socket
    import subprocess

    from audit.options import RelayOptions
    from audit.settings import AuditSettings

    gone = subprocess.Popen(["true"])
    gone.wait()
    options = RelayOptions.from_settings(
        AuditSettings(),
        block_ms=50,
        claim_idle_ms=60_000,
        connect_timeout_s=2.0,
        command_timeout_s=10.0,
    )
    dead = AuditRelay(
        redis,
        namespace,
        database_url,
        RelayOptions.from_settings(
            AuditSettings(), block_ms=50, consumer=f"{socket.gethostname()}:{gone.pid}:deadbeef"
        ),
    )
    await outbox.scheduled("orphan-1")
    await outbox.scheduled("orphan-2")
    assert len(await dead.read_batch(50)) == 2  # read, never written nor acknowledged
    await dead.stream.aclose()
    await dead.writer.close()
    alive = AuditRelay(redis, namespace, database_url, options)
    try:
        assert await drain(alive) == 2, "taken over at once, though claim_idle_ms is 60 s"
    finally:
        await alive.stop()
    assert {r["id"] for r in await db.fetch("SELECT id FROM schedule_audit")} == {
        "orphan-1",
        "orphan-2",
    }
