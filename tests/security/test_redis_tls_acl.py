"""Redis over TLS with per-namespace ACL users (issue 16, Security): a worker of namespace A
with A's user schedules and runs jobs end to end (scripts, reads, the wake-up channel,
the audit relay's stream commands) on a TLS-only server that verifies nothing but its CA;
A's user can neither read nor change namespace B (NOPERM, a clear StorageError); a wrong
CA is a clear error. The server is the run's own (conftest.py, redis_tls.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from horae.settings import load_settings
from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState, Scheduler, StorageError
from scheduler.store.pipe import Endpoint, open_pipe
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import (
    START_MS,
    audited_scheduler,
    eventually,
    in_state,
    make_scheduler,
)
from tests.security.conftest import NS_A, NS_B, USER_A, USER_B
from tests.security.redis_tls import README_RULE, TlsRedis

ROOT = Path(__file__).resolve().parents[2]


def _registry(ran: list[Any]) -> ListenerRegistry:
    reg = ListenerRegistry()

    @reg.on_event("tls.job")
    async def job(event: ScheduleArrivedEvent) -> None:
        ran.append(event.payload)

    return reg


def _snapshot(client: redis.Redis, namespace: str) -> dict[bytes, Any]:
    """Every key of a namespace with its type and value, as the admin sees them."""
    out: dict[bytes, Any] = {}
    for key in client.scan_iter(match="{" + namespace + "}:*"):
        kind = client.type(key)
        value: Any = {
            b"hash": client.hgetall,
            b"zset": lambda k: client.zrange(k, 0, -1, withscores=True),
            b"set": client.smembers,
            b"string": client.get,
            b"stream": lambda k: client.xrange(k),
        }.get(kind, lambda k: None)(key)
        out[key] = (kind, value)
    return out


async def test_a_worker_runs_jobs_end_to_end_over_tls_with_its_namespace_user(
    tls_redis: TlsRedis, database_url: str
) -> None:
    ran: list[Any] = []
    clock = FakeClock(START_MS)
    url = tls_redis.url(USER_A)
    assert url.startswith("rediss://horae-a:")
    with tls_redis.admin() as admin:
        admin.execute_command("ACL", "LOG", "RESET")
    async with audited_scheduler(url, database_url, NS_A, _registry(ran), clock) as s:
        early = await s.schedule_in("tls.job", 0, payload={"n": 1})
        later = await s.schedule_in("tls.job", "5s", payload={"n": 2}, job_id="tls-later")
        await s.schedule_cron("tls-cron", "*/10 * * * * *", topic="tls.job", payload={"n": "cron"})
        async with s.worker(concurrency=2):
            await eventually(
                lambda: in_state(s, early, JobState.COMPLETED), what="the first job over TLS"
            )
            assert {w.id for w in await s.workers()}, "the worker advertised itself"
            clock.advance(
                10
            )  # the later job and one cron tick come due: the wake-up channel and fire_crons
            await eventually(lambda: in_state(s, later, JobState.COMPLETED), what="the delayed job")
            await eventually(lambda: _has(ran, {"n": "cron"}), what="a cron tick")
            now = await s.schedule_in(
                "tls.job", 0, payload={"n": 3}
            )  # while the worker runs: local handoff
            await eventually(
                lambda: in_state(s, now, JobState.COMPLETED), what="a job scheduled while running"
            )
        assert (await s.stats())["completed"] >= 4
        assert [j.id for j in (await s.jobs(state=JobState.COMPLETED)).items]
        await s.audit.flush(timeout=20)
        for job_id in (early, later, now):
            row = await s.audit.get(job_id)
            assert row is not None and row.status == "completed", (job_id, row)
    settings = load_settings(
        path=None, env={}, redis_url=url, database_url=database_url, namespace=NS_A
    )
    async with Scheduler(
        settings=settings, listeners=_registry(ran)
    ) as real:  # the clock calibrated by TIME
        job = await real.schedule_in("tls.job", 0, payload={"n": "system clock"})
        async with real.worker():
            await eventually(
                lambda: in_state(real, job, JobState.COMPLETED), what="a job on the system clock"
            )
        assert (await real.audit.lag())[0] >= 0
    assert {"n": 1} in ran and {"n": 2} in ran and {"n": 3} in ran
    with tls_redis.admin() as admin:
        assert admin.exists(f"{{{NS_A}}}:j:tls-later")
        refused = admin.execute_command("ACL", "LOG")
    assert refused == [], f"the README's ACL rule must allow every command horae sent: {refused}"


async def _has(items: list[Any], item: Any) -> bool:
    return item in items


async def test_the_user_of_a_can_neither_read_nor_change_namespace_b(tls_redis: TlsRedis) -> None:
    async with make_scheduler(tls_redis.url(USER_B), NS_B, ListenerRegistry()) as b:
        b_job = await b.schedule_in("tls.b", "1h", payload={"secret": "of b"}, job_id="b-job")
    with tls_redis.admin() as admin:
        before = _snapshot(admin, NS_B)
    assert any(k.endswith(b":j:b-job") for k in before)

    async with make_scheduler(tls_redis.url(USER_A), NS_B, ListenerRegistry()) as intruder:
        for attempt in (
            intruder.schedule_in("tls.b", 0),
            intruder.get_job(b_job),
            intruder.cancel(b_job),
            intruder.stats(),
            intruder.delete(b_job),
        ):
            with pytest.raises(StorageError) as info:
                await attempt
            text = str(info.value)
            assert "NOPERM" in text and "ACL" in text and f"~{{{NS_B}}}:*" in text, text
            assert tls_redis.passwords[USER_A] not in text
        with pytest.raises(StorageError, match="NOPERM"):
            async with intruder.worker(all_topics=True):
                pass

    client = aioredis.Redis.from_url(tls_redis.url(USER_A))
    try:
        for command in (
            ("HGETALL", f"{{{NS_B}}}:j:b-job"),
            ("SET", f"{{{NS_B}}}:x", "1"),
            ("DEL", f"{{{NS_B}}}:j:b-job"),
            ("PUBLISH", f"{{{NS_B}}}:wake", "0"),
            ("XADD", f"{{{NS_B}}}:outbox", "*", "f", "v"),
            ("FLUSHALL",),
            ("KEYS", "*"),
            ("CONFIG", "GET", "*"),
            ("EVAL", "return redis.call('GET', KEYS[1])", 1, f"{{{NS_B}}}:x"),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                await client.execute_command(*command)
        pubsub = client.pubsub()
        with pytest.raises(redis.exceptions.NoPermissionError):
            await pubsub.subscribe(f"{{{NS_B}}}:wake")
            await asyncio.wait_for(pubsub.get_message(timeout=1), 5)
        await pubsub.aclose()
        assert await client.set(f"{{{NS_A}}}:own", "1"), "its own namespace stays writable"
    finally:
        await client.aclose()
    with tls_redis.admin() as admin:
        assert _snapshot(admin, NS_B) == before, "namespace B is unchanged"


async def test_a_wrong_ca_is_a_clear_error(tls_redis: TlsRedis) -> None:
    url = tls_redis.url(USER_A, ca=tls_redis.certs.other_ca)
    settings = load_settings(
        path=None, env={"HORAE_AUDIT__RELAY": "false"}, redis_url=url, namespace=NS_A
    )
    with pytest.raises(StorageError) as info:  # connect() calibrates the clock over redis-py
        async with Scheduler(settings=settings, listeners=ListenerRegistry()):
            pass
    assert "certificate verify failed" in str(info.value), str(info.value)
    async with make_scheduler(
        url, NS_A, ListenerRegistry()
    ) as s:  # a FakeClock: the first call is the wire's
        with pytest.raises(StorageError) as wire_info:
            await s.get_job("x")
    text = str(wire_info.value)
    assert "TLS certificate was refused" in text and "ssl_ca_certs" in text, text
    for message in (str(info.value), text):
        assert tls_redis.passwords[USER_A] not in message


async def test_an_address_the_certificate_does_not_name_is_refused(tls_redis: TlsRedis) -> None:
    # the certificate names localhost only: the same server by its IP address fails the hostname
    # check
    async with make_scheduler(
        tls_redis.url(USER_A, host="127.0.0.1"), NS_A, ListenerRegistry()
    ) as s:
        with pytest.raises(StorageError) as info:
            await s.get_job("x")
    assert "TLS certificate was refused" in str(info.value) and "127.0.0.1" in str(info.value), str(
        info.value
    )


def test_the_security_guide_documents_the_acl_rule_the_test_server_uses() -> None:
    text = (ROOT / "docs" / "how-to" / "security.md").read_text()
    assert README_RULE in text, (
        f"docs/how-to/security.md must show the ACL rule line:\n{README_RULE}"
    )


def _sockets_to(port: int) -> int:
    return sum(1 for c in psutil.Process().net_connections("tcp") if c.raddr and c.raddr[1] == port)


def test_a_refused_login_leaves_no_socket_open(tls_redis: TlsRedis) -> None:
    """A connection Redis refuses (WRONGPASS) is closed by the time the error reaches the
    caller: over TLS an unawaited close outlived the caller's event loop and left the socket
    to the garbage collector (a ResourceWarning that failed other tests at random)."""
    url = tls_redis.url(USER_A).replace(tls_redis.passwords[USER_A], "wrong-pw-5ca1ab1e")
    endpoint = Endpoint.of_pool(aioredis.ConnectionPool.from_url(url))
    before = _sockets_to(tls_redis.port)

    async def refused() -> int:
        with pytest.raises(ResponseError, match="WRONGPASS"):
            await open_pipe(endpoint)
        return _sockets_to(tls_redis.port)  # before anything else may run on the loop

    assert asyncio.run(refused()) == before
