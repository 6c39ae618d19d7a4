"""`horae partitions migrate` on a real Redis Cluster (README: Scaling out): a mixed namespace
moves 1 -> 6 -> 3 and a worker with the new count runs each due job once; the refusals (a live
worker, a leased job, an unrelayed outbox); a process connecting meanwhile is refused; the
command SIGKILLed mid-way and run again leaves each job exactly once with consistent counts."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from typing import Any

import pytest

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler.core.errors import ConfigError, MigrationRefused
from scheduler.core.keys import Keys
from scheduler.ops.migration_plan import glob_escape
from tests.migrate_scenario import (
    check_dedupe_kept,
    migrate,
    populate,
    run_all,
    scheduler,
    snapshot,
)
from tests.procs import HORAE, ROOT, child_env


async def keys_of(redis: Any, tag: Keys, kind: str = "") -> list[str]:
    """The keys of one partition (of one kind, e.g. "j:"), scanned on every master."""
    return [
        k.decode()
        async for k in redis.scan_iter(match=glob_escape(tag.prefix + kind) + "*", count=1000)
    ]


async def test_a_mixed_namespace_moves_1_to_6_to_3_and_runs_each_job_once(
    cluster_url: str, namespace: str, cluster_redis: Any
) -> None:
    populated = await populate(cluster_url, namespace, 1)
    async with scheduler(cluster_url, namespace, 1) as s:
        before = await snapshot(s)
    summary, said = await migrate(cluster_url, namespace, 6)
    assert (
        sum(summary.jobs.values()) == 76
        and sum(summary.schedules.values()) == 3
        and not summary.conflicts
    )
    assert said[-1] == f"namespace {namespace!r} now has partitions=6"
    assert await keys_of(cluster_redis, Keys(namespace)) == [
        Keys(namespace).meta
    ]  # the old layout is gone
    spread = [len(await keys_of(cluster_redis, Keys(namespace, p), "j:")) for p in range(6)]
    assert sum(spread) == 76 and min(spread) > 0, spread
    async with scheduler(cluster_url, namespace, 6) as s:
        assert await snapshot(s) == before
        await check_dedupe_kept(s)
    summary, _ = await migrate(cluster_url, namespace, 3)
    assert sum(summary.jobs.values()) > 0 and not summary.conflicts
    for p in range(3, 6):
        assert await keys_of(cluster_redis, Keys(namespace, p)) == []
    async with scheduler(cluster_url, namespace, 3) as s:
        assert await snapshot(s) == before
        await check_dedupe_kept(s)
    await run_all(cluster_url, namespace, 3, populated)


async def test_a_live_worker_a_leased_job_and_an_unrelayed_outbox_refuse_the_migration(
    cluster_url: str, namespace: str, cluster_redis: Any
) -> None:
    reg, release, started = ListenerRegistry(), asyncio.Event(), asyncio.Event()

    @reg.on_event("slow")
    async def slow(event: ScheduleArrivedEvent) -> None:
        started.set()
        await release.wait()

    async with scheduler(cluster_url, namespace, 2, reg, audit=True) as s:
        await s.schedule_in("slow", 0)
        async with s.worker():
            await asyncio.wait_for(started.wait(), 10)
            with pytest.raises(MigrationRefused) as refused:
                await migrate(cluster_url, namespace, 4)
            release.set()
        text = str(refused.value)
        assert "from partitions=2 to partitions=4" in text
        assert "1 live worker(s) still beat" in text and "1 job(s) are leased (running)" in text, (
            text
        )
        assert "audit outbox event(s) are not relayed yet: run `horae audit relay`" in text, text
    with pytest.raises(
        MigrationRefused, match=r"^namespace .* now: \d+ audit outbox event\(s\) are not relayed"
    ):
        await migrate(cluster_url, namespace, 4)  # the worker stopped: only the outbox is left
    assert (
        await cluster_redis.hget(Keys(namespace).meta, "partitions")
    ) == b"2"  # nothing was recorded
    lock = Keys(namespace).prefix + "migrate_lock"
    await cluster_redis.set(lock, "elsewhere pid 1", px=60_000)  # another run, on another host
    with pytest.raises(
        MigrationRefused,
        match=r"another migration run \(elsewhere pid 1\) holds the migration lock",
    ):
        await migrate(cluster_url, namespace, 4)
    await cluster_redis.delete(lock)
    for p in range(2):  # relay it as the audit relay does: read through the group, acknowledge
        stream = Keys(namespace, p).outbox
        await cluster_redis.xgroup_create(stream, "audit", id="0", mkstream=True)
        reply = await cluster_redis.xreadgroup("audit", "test", {stream: ">"}, count=1000)
        for _, entries in reply.items() if isinstance(reply, dict) else reply:
            for batch in entries if isinstance(reply, dict) else [entries]:
                await cluster_redis.xack(stream, "audit", *[i for i, _ in batch])
    summary, _ = await migrate(cluster_url, namespace, 4)
    assert not summary.conflicts
    async with scheduler(cluster_url, namespace, 4) as s:
        assert (await s.stats()).get("completed") == 1


def _horae(url: str, namespace: str, *args: str) -> subprocess.Popen[str]:
    env = {
        **child_env(),
        "HORAE_REDIS_URL": url,
        "HORAE_NAMESPACE": namespace,
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.Popen(
        [str(HORAE), *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def test_a_killed_migration_refuses_connects_and_finishes_when_run_again(
    cluster_url: str, namespace: str, cluster_redis: Any
) -> None:
    n = 4000
    async with scheduler(cluster_url, namespace, 1) as s:
        ids = await s.schedule_many(
            [{"topic": "bulk", "delay": 3600, "key": f"k{i % 50}"} for i in range(n)]
        )
        await s.schedule_cron("daily", "0 3 * * *", topic="bulk")
    proc = _horae(cluster_url, namespace, "partitions", "migrate", "--to", "6")
    assert proc.stdout is not None
    out = []
    for line in proc.stdout:  # SIGKILL right after the first batch moved
        out.append(line)
        if line.startswith("moved ") and "jobs from" in line:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.stdout.close()
    assert proc.wait(10) == -signal.SIGKILL, "".join(out)
    meta = await cluster_redis.hgetall(Keys(namespace).meta)
    assert meta[b"migrating_to"] == b"6" and meta[b"migrating_from"] == b"1", meta
    left = len(await keys_of(cluster_redis, Keys(namespace), "j:"))
    assert 0 < left < n, left  # killed half-way: jobs on both layouts
    for count in (1, 6):
        with pytest.raises(
            ConfigError,
            match=r"is being migrated from partitions=1 to partitions=6 .*"
            r"`horae partitions migrate --to 6` again",
        ):
            async with scheduler(cluster_url, namespace, count):
                pass
    status = _horae(cluster_url, namespace, "partitions", "status")
    text = status.communicate(timeout=30)[0]
    assert "migration: 1 -> 6 in progress" in text, text
    again = _horae(
        cluster_url, namespace, "partitions", "migrate", "--to", "6"
    )  # the killed run's lock is taken over
    text, code = again.communicate(timeout=60)[0], again.returncode
    assert code == 0 and "resuming the migration" in text and "now has partitions=6" in text, text
    found: list[str] = []
    for p in range(6):
        tag = Keys(namespace, p)
        here = [k[len(tag.prefix) + 2 :] for k in await keys_of(cluster_redis, tag, "j:")]
        counts = {k.decode(): int(v) for k, v in (await cluster_redis.hgetall(tag.counts)).items()}
        assert counts.get("bulk|scheduled", 0) == len(here), (p, counts, len(here))
        found += here
    assert sorted(found) == sorted(ids)  # each job exactly once
    async with scheduler(cluster_url, namespace, 6) as s:
        assert (await s.stats())["scheduled"] == n
        assert [c.name for c in await s.list_crons()] == ["daily"]
