"""`horae partitions migrate` on one Redis (README: Scaling out): a mixed namespace moves from the
unpartitioned layout to 4 partitions and back to 1, keeping every job, count, schedule, topic and
dedupe key; then a worker runs each due job exactly once. The CLI refuses a live worker and
records a migration in the audit. (The cluster tests: tests/cluster/test_migrate.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from click.testing import CliRunner

from audit.options import RelayOptions
from audit.reader import AuditTrail
from horae.settings import load_settings
from scheduler.cli.main import cli
from scheduler.core.keys import Keys
from scheduler.store.clients import redis_client
from scheduler.testing.under_test import delete_namespace
from tests.migrate_scenario import (
    check_dedupe_kept,
    migrate,
    populate,
    run_all,
    scheduler,
    snapshot,
)


@pytest.fixture
async def parted_namespace(redis_url: str, namespace: str) -> AsyncIterator[str]:
    """The test's namespace, with its partitions' keys ({ns|p}) deleted afterwards too."""
    yield namespace
    await delete_namespace(redis_url, namespace)


async def test_a_mixed_namespace_moves_1_to_4_to_1_and_runs_each_job_once(
    redis_url: str, parted_namespace: str, redis: object
) -> None:
    ns = parted_namespace
    populated = await populate(redis_url, ns, 1)
    async with scheduler(redis_url, ns, 1) as s:
        before = await snapshot(s)
    assert {t for t, *_ in before["known"]} >= {"done", "fragile"}  # the topic memory moves too
    dry, said = await migrate(redis_url, ns, 4, dry_run=True)
    assert sum(dry.jobs.values()) == 76 and sum(dry.schedules.values()) == 3, dry
    assert said == []  # no precondition problem
    summary, said = await migrate(redis_url, ns, 4)
    assert sum(summary.jobs.values()) == 76 and not summary.conflicts, summary
    assert said[-1] == f"namespace {ns!r} now has partitions=4"
    assert [k async for k in redis.scan_iter(match="{" + ns + "}:*")] == [Keys(ns).meta.encode()]  # type: ignore[attr-defined]
    async with scheduler(redis_url, ns, 4) as s:
        assert await snapshot(s) == before
        await check_dedupe_kept(s)
    again, said = await migrate(redis_url, ns, 4)
    assert said == [f"namespace {ns!r} has partitions=4 already: nothing to do"]
    await migrate(redis_url, ns, 1)
    async with scheduler(redis_url, ns, 1) as s:
        assert await snapshot(s) == before
    await run_all(redis_url, ns, 1, populated)


async def test_the_cli_migrates_records_the_action_in_the_audit_and_refuses_a_live_worker(
    redis_url: str, parted_namespace: str, database_url: str
) -> None:
    ns = parted_namespace
    args = [
        "--redis-url",
        redis_url,
        "--database-url",
        database_url,
        "--namespace",
        ns,
        "partitions",
        "migrate",
    ]
    async with scheduler(redis_url, ns, 1) as s:
        await s.schedule_in("t", 3600)
        async with s.worker(topics=["other"]):
            refused = await asyncio.to_thread(CliRunner().invoke, cli, [*args, "--to", "2"])
    assert refused.exit_code == 1 and "1 live worker(s) still beat" in refused.output, (
        refused.output
    )
    done = await asyncio.to_thread(CliRunner().invoke, cli, [*args, "--to", "2"])
    assert done.exit_code == 0 and "moved 1 jobs {" + ns + "}: -> {" + ns + "|" in done.output, (
        done.output
    )
    settings = load_settings(env={}, redis_url=redis_url)
    redis = redis_client(redis_url, settings)
    try:
        async with AuditTrail(
            redis, ns, database_url, RelayOptions.from_settings(settings.audit, partitions=2)
        ) as trail:
            [action] = await trail.actions(target=ns)
    finally:
        await redis.aclose()
    assert (action.action, action.outcome, action.detail) == (
        "partitions.migrate",
        "done",
        {"from": 1, "to": 2, "jobs": 1, "schedules": 0},
    )


async def test_a_job_waiting_for_parents_refuses_the_migration(
    redis_url: str, parted_namespace: str
) -> None:
    """A child lives on its parents' partition, not its own route: the migration refuses while
    one waits, and runs once none does."""
    from scheduler import Flow
    from scheduler.core.errors import MigrationRefused

    async with scheduler(redis_url, parted_namespace, 2) as s:
        root = await s.flow(Flow("t", children=[Flow("t", delay="1h")]))
    with pytest.raises(MigrationRefused, match=r"1 job\(s\) wait for parents \(after=, a flow\)"):
        await migrate(redis_url, parted_namespace, 4)
    async with scheduler(redis_url, parted_namespace, 2) as s:
        await s.cancel(root)
    summary, said = await migrate(redis_url, parted_namespace, 4)
    assert not summary.conflicts and said[-1].endswith("now has partitions=4")
    async with scheduler(redis_url, parted_namespace, 4) as s:
        stats = await s.stats()
        assert (stats.scheduled, stats.cancelled, stats.waiting_for_parents) == (1, 1, 0)
