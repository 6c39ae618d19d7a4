"""Failover: SIGKILL a master of a real Redis Cluster while 3 worker processes run jobs spread
over 6 partitions; its replica is promoted and the run ends with every job in a terminal state
and PostgreSQL's audit equal to Redis. With durability="replicated" (WAIT 1 after every
transition) no job whose scheduling was acknowledged is lost; without it, the test reports
what asynchronous replication lost (README: Scaling out). Each test has a cluster of its own:
it kills a node. FAILOVER_JOBS sets the jobs per test (`make test`: 1,500; by hand: 10,000)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from redis.exceptions import RedisError

from horae.settings import load_settings
from listeners import ListenerRegistry
from scheduler import Scheduler
from scheduler.core.errors import StorageError
from scheduler.core.keys import Keys
from tests.cluster.conftest import delete_namespace
from tests.cluster.servers import RedisCluster, start_cluster
from tests.procs import WorkerProcesses
from tests.procs.worker_app import COUNT_TOPIC

JOBS = int(os.environ.get("FAILOVER_JOBS", "1500"))
PARTITIONS = 6
LEASE_MS = 3000
# The listener's own Redis calls fail while its master is down: the attempt is retried a second
# later.
RETRY = {"attempts": 10, "backoff": {"type": "fixed", "delay": 1000}}
RESTART_AFTER_S = (
    2.0  # the killed master is started again this long after, once its replica took over
)


@pytest.fixture
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    cluster = start_cluster(Path(tmp_path_factory.mktemp("failover-cluster")))
    yield cluster
    cluster.stop()


async def run_with_failover(
    cluster: RedisCluster, database_url: str, tmp_path: Path, durability: str
) -> dict[str, object]:
    """Schedule JOBS while 3 workers run them, SIGKILL the master of partition 0 a third of the
    way in; wait until every job in Redis is terminal and the audit flushed; compare."""
    namespace = f"fo-{durability}-{os.getpid()}-{int(time.time())}"
    url = f"{cluster.url}?partitions={PARTITIONS}"
    env = {
        "HORAE_AUDIT__RELAY": "true",
        "HORAE_DATABASE_URL": database_url,
        "HORAE_WORKER__LEASE_MS": str(LEASE_MS),
        "HORAE_WORKER__RECOVER_INTERVAL_S": "0.3",
        "HORAE_RETENTION__COMPLETED_COUNT": str(10 * JOBS),
        "HORAE_CLUSTER__DURABILITY": durability,
        # a batch whose XACK the failover lost stays pending: another relay takes it over after this
        "HORAE_AUDIT__CLAIM_IDLE_MS": "2000",
    }
    workers = WorkerProcesses(url, namespace, tmp_path)
    try:
        procs = [workers.spawn(f"w{i}", concurrency=50, grace=5, env=env) for i in range(3)]
        for p in procs:
            await p.wait_ready()
        base = load_settings(env={}, redis_url=url, database_url=database_url, namespace=namespace)
        settings = base.model_copy(
            update={"cluster": base.cluster.model_copy(update={"durability": durability})}
        )
        acknowledged: list[str] = []
        victim = cluster.owner_of(Keys(namespace, 0).due)
        async with Scheduler(settings=settings, listeners=ListenerRegistry()) as s:
            started = time.monotonic()
            killed_at, restarted, last_error = None, False, ""
            for start in range(0, JOBS, 100):
                batch = [
                    {"topic": COUNT_TOPIC, "job_id": f"j{i}", "retry": RETRY}
                    for i in range(start, min(start + 100, JOBS))
                ]
                if killed_at is None and start >= JOBS // 3:
                    cluster.kill(victim)
                    killed_at = time.monotonic()
                for _ in range(200):  # the same ids again after an error: scheduling is idempotent
                    try:
                        acknowledged += await s.schedule_many(batch)
                        break
                    except StorageError as exc:
                        last_error = str(exc)
                        await asyncio.sleep(0.1)
                        # The promoted replica has no replica of its own: with durability
                        # "replicated" its writes fail (WAIT) until the dead node is back, as the
                        # operator restarts it. (Only once its replica is promoted: a master without
                        # persistence that came back first would rejoin empty, and its replica would
                        # copy the emptiness.)
                        if (
                            durability == "replicated"
                            and killed_at is not None
                            and not restarted
                            and time.monotonic() - killed_at > RESTART_AFTER_S
                            and promoted_over(cluster, victim)
                        ):
                            cluster.restart(victim)
                            restarted = True
                else:
                    raise AssertionError(
                        f"scheduling failed for 20 s after the failover "
                        f"(restarted: {restarted}): {last_error}\n{workers.logs()}"
                    )
            scheduled_s = time.monotonic() - started
            cluster.wait_ok(timeout=30)
            promoted = time.monotonic() - (killed_at or started)
            if durability == "replicated":
                assert restarted, "the killed master was not restarted"

            async def settled() -> dict[str, int] | None:
                try:
                    stats = await s.stats()
                except StorageError:
                    return None
                return (
                    stats
                    if stats["scheduled"] + stats["running"] + stats["retrying"] == 0
                    else None
                )

            deadline = time.monotonic() + 120
            while (stats := await settled()) is None:
                assert time.monotonic() < deadline, (
                    f"jobs never settled: {await s.stats()}\n{workers.logs()}"
                )
                await asyncio.sleep(0.2)
            drained_s = time.monotonic() - started
            await s.audit.flush(timeout=60)
            infos = await s.store.get_jobs(acknowledged)
            redis_view = {i.id: (i.state.value, i.attempts) for i in infos if i is not None}
            lost = [j for j, i in zip(acknowledged, infos) if i is None]
        for p in procs:
            p.signal(signal.SIGTERM)
        conn = await asyncpg.connect(database_url)
        try:
            rows = await conn.fetch("SELECT id, status, attempts FROM schedule_audit")
        finally:
            await conn.close()
        pg_view = {r["id"]: (r["status"], r["attempts"]) for r in rows if r["id"] in redis_view}
        mismatched = {j: (v, pg_view.get(j)) for j, v in redis_view.items() if pg_view.get(j) != v}
        runs = await _runs(url, namespace)
        result = {
            "jobs": JOBS,
            "acknowledged": len(acknowledged),
            "lost": len(lost),
            "stats": stats,
            "ran_twice": sum(1 for n in runs.values() if n > 1),
            "never_ran": len(set(redis_view) - set(runs)),
            "mismatched": len(mismatched),
            "scheduled_s": round(scheduled_s, 1),
            "drained_s": round(drained_s, 1),
            "promoted_after_s": round(promoted, 1),
            "victim": victim.port,
            "restarted": restarted,
        }
        print(f"\nfailover ({durability}): {result}")
        assert not mismatched, (
            f"audit differs from Redis for {len(mismatched)} jobs: {list(mismatched.items())[:5]}"
        )
        assert all(state in ("completed", "failed") for state, _ in redis_view.values())
        return result
    finally:
        workers.close()
        delete_namespace(cluster.url, namespace)


def promoted_over(cluster: RedisCluster, victim: object) -> bool:
    """Whether the cluster is whole again without the killed master (its replica serves its
    slots)."""
    try:
        cluster.wait_ok(timeout=0.2)
    except RuntimeError:
        return False
    return all(cluster.owner_of("{x" + str(i) + "}") is not victim for i in range(64))


async def _runs(url: str, namespace: str) -> Counter[str]:
    from scheduler.store.clients import redis_client
    from tests.procs import app_key

    client = redis_client(url)
    try:
        raw = await client.hgetall(app_key(namespace, "runs"))  # type: ignore[attr-defined]
    except RedisError:
        return Counter()
    finally:
        await client.aclose()  # type: ignore[attr-defined]
    return Counter({k.decode(): int(v) for k, v in raw.items()})


async def test_a_master_killed_mid_run_is_replaced_and_every_job_ends(
    own_cluster: RedisCluster, database_url: str, tmp_path: Path
) -> None:
    result = await run_with_failover(own_cluster, database_url, tmp_path, "async")
    assert result["acknowledged"] == JOBS


async def test_with_replicated_durability_no_acknowledged_job_is_lost(
    own_cluster: RedisCluster, database_url: str, tmp_path: Path
) -> None:
    result = await run_with_failover(own_cluster, database_url, tmp_path, "replicated")
    assert result["lost"] == 0, f"{result['lost']} acknowledged jobs are gone after the failover"
    assert result["never_ran"] == 0
