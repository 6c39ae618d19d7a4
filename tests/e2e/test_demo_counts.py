"""`horae demo` counts only the jobs of its own run (issue 29): the demo namespace still
holds an earlier run's jobs (here: one seeded before), and the closing line must not add
them to the 4 jobs of the table above it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import redis as sync_redis

from listeners import ListenerRegistry
from tests.integration.engine_fixtures import make_scheduler
from tests.procs import child_env

ROOT = Path(__file__).resolve().parents[2]
HORAE = str(Path(sys.executable).with_name("horae"))


async def test_the_closing_line_counts_this_runs_jobs_only(
    redis_url: str, database_url: str, namespace: str
) -> None:
    async with make_scheduler(redis_url, f"{namespace}-demo", ListenerRegistry()) as earlier:
        await earlier.schedule_in("earlier.run", 3_600_000)  # still waiting when the demo runs
    env = {
        **child_env(),
        "HORAE_REDIS_URL": redis_url,
        "HORAE_DATABASE_URL": database_url,
        "HORAE_NAMESPACE": namespace,
    }
    try:
        result = subprocess.run(
            [HORAE, "demo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=90
        )
        assert result.returncode == 0, result.stderr[-3000:]
        line = next(x for x in result.stdout.splitlines() if x.startswith("settled in "))
        assert re.search(r"this run's 4 jobs: completed 3, failed 1$", line), line
    finally:
        client = sync_redis.Redis.from_url(redis_url)
        keys = list(client.scan_iter(match="{" + namespace + "-demo}:*"))
        if keys:
            client.delete(*keys)
        client.close()
