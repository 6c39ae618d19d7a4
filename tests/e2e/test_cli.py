"""The `horae` command as a user runs it: demo, cron, jobs, services."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import redis as sync_redis

from tests.procs import child_env

ROOT = Path(__file__).resolve().parents[2]
HORAE = str(Path(sys.executable).with_name("horae"))


def run(
    args: list[str], env: dict[str, str], timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HORAE, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def cli_env(redis_url: str, database_url: str, namespace: str) -> dict[str, str]:
    env = child_env()
    return {
        **env,
        "HORAE_REDIS_URL": redis_url,
        "HORAE_DATABASE_URL": database_url,
        "HORAE_NAMESPACE": namespace,
    }


def test_demo_prints_what_happened_to_each_job(
    redis_url: str, database_url: str, namespace: str
) -> None:
    try:
        result = run(["demo"], cli_env(redis_url, database_url, namespace))
        assert result.returncode == 0, result.stderr[-3000:]
        out = result.stdout
        assert "What happened" in out
        rows = {
            line.split("│")[2].strip(): line for line in out.splitlines() if line.count("│") >= 6
        }
        assert "completed" in rows["billing.remind"] and "1/3" in rows["billing.remind"]
        assert "completed" in rows["payments.charge"] and "3/3" in rows["payments.charge"]
        assert "failed" in rows["reports.export"] and "ValueError" in rows["reports.export"]
        assert "completed" in rows["audit.ping"]
        assert "schedule.failed events received: ['reports.export']" in out
    finally:
        client = sync_redis.Redis.from_url(redis_url)
        keys = list(client.scan_iter(match="{" + namespace + "-demo}:*"))
        if keys:
            client.delete(*keys)
        client.close()


def test_cron_commands_show_next_run_in_zone_and_utc(
    redis_url: str, database_url: str, namespace: str
) -> None:
    env = cli_env(redis_url, database_url, namespace)
    added = run(
        [
            "cron",
            "add",
            "nightly-invoices",
            "0 3 * * *",
            "--topic",
            "billing.invoice",
            "--tz",
            "America/Chicago",
        ],
        env,
    )
    assert added.returncode == 0, added.stderr
    assert (
        run(["cron", "pause", "nightly-invoices"], env).stdout.strip() == "nightly-invoices: paused"
    )
    assert run(["cron", "resume", "nightly-invoices"], env).returncode == 0
    listed = run(["cron", "list"], env)
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if "nightly-invoices" in line)
    assert (
        "America/Chicago" in row and "03:00:00" in row and ("09:00:00" in row or "08:00:00" in row)
    )
    bad = run(["cron", "add", "x", "99 * * * *", "--topic", "t"], env)
    assert bad.returncode != 0 and "minute field '99' is invalid" in bad.stderr
    deleted = run(["cron", "delete", "nightly-invoices"], env)
    assert deleted.stdout.strip() == "nightly-invoices: deleted" and deleted.stderr == ""
    assert run(["cron", "delete", "nightly-invoices"], env).returncode != 0
    # the old name, kept one release: the same, plus a warning on stderr naming the new one
    assert run(["cron", "add", "n", "0 3 * * *", "--topic", "t"], env).returncode == 0
    removed = run(["cron", "remove", "n"], env)
    assert removed.returncode == 0 and removed.stdout.strip() == "n: removed"
    assert "use `horae cron delete`" in removed.stderr


def test_bad_config_value_is_a_clear_error(
    redis_url: str, database_url: str, namespace: str
) -> None:
    env = {**cli_env(redis_url, database_url, namespace), "HORAE_WORKER__CONCURRENCY": "0"}
    result = run(["jobs", "stats"], env)
    assert result.returncode != 0
    assert "worker.concurrency='0'" in result.stderr


def test_worker_without_listeners_refuses_to_start(
    redis_url: str, database_url: str, namespace: str
) -> None:
    result = run(["worker"], cli_env(redis_url, database_url, namespace))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "Error: the worker has no listeners: pass --app "
        "module[:registry], or --all-topics to claim every topic"
    ]
    result = run(
        ["worker", "--all-topics", "--topics", "x"], cli_env(redis_url, database_url, namespace)
    )
    assert result.returncode == 2 and "exclude each other" in result.stderr
