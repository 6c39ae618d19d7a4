"""PostgreSQL over TLS with sslmode=verify-full, and least privilege (issue 16, Security):
migrations run as the schema's owner, `horae audit grant` gives a relay role and a reader
role what they use; a worker relays its audit and a reader reads it as those roles, over
TLS, while neither may create, alter, drop or truncate anything. A wrong CA, a name the
certificate does not hold and a plaintext connection are refused."""

from __future__ import annotations

import asyncpg
import pytest
import redis.asyncio as aioredis

from audit.migrate import migrate_url
from audit.options import RelayOptions
from audit.reader import AuditTrail
from audit.settings import AuditSettings
from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState, StorageError
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import START_MS, audited_scheduler, eventually, in_state
from tests.security.postgres_tls import TlsPostgres

FORBIDDEN = [
    "DROP TABLE schedule_audit",
    "ALTER TABLE schedule_audit ADD COLUMN x integer",
    "TRUNCATE schedule_events",
    "CREATE TABLE intruder (x integer)",
    "CREATE INDEX intruder ON schedule_job_index (created_at)",
    "DELETE FROM schema_version",
    "SELECT audit_drop_partitions(now())",
    "SELECT audit_grant('horae_reader', 'relay')",
    "ALTER FUNCTION audit_ensure_partitions(date) SECURITY INVOKER",
]


async def test_a_worker_relays_and_a_reader_reads_audit_over_verify_full_tls_as_restricted_roles(
    migrated_audit: TlsPostgres, redis_url: str, namespace: str
) -> None:
    pg = migrated_audit
    reg = ListenerRegistry()

    @reg.on_event("pg.tls")
    async def fail_once(event: ScheduleArrivedEvent) -> None:
        if event.attempt == 1:
            raise RuntimeError("first attempt fails")

    clock = FakeClock(START_MS)
    async with audited_scheduler(redis_url, pg.url("horae_relay"), namespace, reg, clock) as s:
        job = await s.schedule_in(
            "pg.tls", 0, retry={"attempts": 2, "backoff": {"type": "fixed", "delay": 1000}}
        )
        async with s.worker():
            await eventually(
                lambda: in_state(s, job, JobState.RETRYING, attempts=1), what="first attempt"
            )
            clock.advance(1)
            await eventually(lambda: in_state(s, job, JobState.COMPLETED), what="second attempt")
        await s.audit.flush(timeout=20)
        row = await s.audit.get(job)
        assert row is not None and row.status == "completed" and row.attempts == 2, row
    redis = aioredis.Redis.from_url(redis_url)
    reader = AuditTrail(
        redis, namespace, pg.url("horae_reader"), RelayOptions.from_settings(AuditSettings())
    )
    try:
        await reader.open()
        attempts = await reader.attempts(job)
        assert [a.outcome for a in attempts] == ["failed", "succeeded"]
    finally:
        await reader.close()
        await redis.aclose()

    for role in ("horae_relay", "horae_reader"):
        conn = await asyncpg.connect(pg.url(role))
        try:
            assert (
                await conn.fetchval("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                is True
            )
            for statement in FORBIDDEN:
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute(statement)
            if role == "horae_reader":
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute("DELETE FROM schedule_audit")
        finally:
            await conn.close()
    owner = await asyncpg.connect(pg.url("horae_owner"))
    try:
        parts = await owner.fetch(
            "SELECT c.relname, pg_get_userbyid(c.relowner) AS owner FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid"
        )
        assert parts and {p["owner"] for p in parts} == {"horae_owner"}, (
            "partitions belong to the owner"
        )
    finally:
        await owner.close()


async def _refusal(url: str) -> str:
    with pytest.raises(StorageError) as info:
        await migrate_url(url)
    return str(info.value)


async def test_a_wrong_ca_a_wrong_name_and_plaintext_are_refused(tls_postgres: TlsPostgres) -> None:
    pg = tls_postgres
    wrong_ca = await _refusal(pg.url("horae_owner", ca=pg.certs.other_ca))
    assert "certificate verify failed" in wrong_ca, wrong_ca
    wrong_name = await _refusal(pg.url("horae_owner", host="127.0.0.1"))
    assert "certificate verify failed" in wrong_name or "match" in wrong_name, wrong_name
    plaintext = await _refusal(pg.url("horae_owner", sslmode="disable"))
    assert "no encryption" in plaintext or "pg_hba.conf" in plaintext, plaintext
    for text in (wrong_ca, wrong_name, plaintext):
        assert pg.passwords["horae_owner"] not in text


async def test_a_restricted_role_on_an_unmigrated_database_is_told_to_run_migrate(
    tls_postgres: TlsPostgres,
) -> None:
    pg = tls_postgres
    admin = await asyncpg.connect(pg.admin_url())
    try:
        await admin.execute("DROP DATABASE IF EXISTS horae_fresh")
        await admin.execute("CREATE DATABASE horae_fresh OWNER horae_owner")
    finally:
        await admin.close()
    message = await _refusal(pg.url("horae_relay", database="horae_fresh"))
    assert "horae migrate" in message and "owner" in message, message


def test_grant_refuses_an_unknown_access() -> None:
    import asyncio

    from audit.migrate import grant

    with pytest.raises(ValueError, match="read' or 'relay"):
        asyncio.run(grant("postgresql://nobody@127.0.0.1:1/x", "r", "write"))
