"""`horae migrate` and `horae audit show|prune|lag` through register() on a host click group."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import click
import redis.asyncio as aioredis
from click.testing import CliRunner

from audit.cli import register
from audit.options import RelayOptions
from audit.reader import AuditTrail
from audit.relay.consumer import AuditRelay
from audit.settings import AuditSettings
from tests.audit_cli import host
from tests.audit_outbox import Outbox


async def _relay_one_job(redis_url: str, namespace: str, database_url: str) -> None:
    redis = aioredis.Redis.from_url(redis_url)
    outbox = Outbox(redis, namespace)
    await outbox.scheduled(
        "cli-job",
        topic="reports.daily",
        run_at=outbox.now,
        max_attempts=2,
        payload={},
        metadata={},
        backoff="fixed",
        tz="UTC",
        timeout_ms=1_000,
    )
    outbox.tick(5)
    await outbox.started("cli-job", 1, due=outbox.now - 5, worker="worker-7", topic="reports.daily")
    outbox.tick(4)
    await outbox.attempt_failed(
        "cli-job", 1, worker="worker-7", error_type="KeyError", message="missing-key", duration=4
    )
    relay = AuditRelay(
        redis, namespace, database_url, RelayOptions.from_settings(AuditSettings(), block_ms=10)
    )
    await relay.start()
    await AuditTrail(redis, namespace, database_url, relay.options).flush(timeout=10)
    await relay.stop()
    await redis.aclose()


def test_cli_commands(redis_url: str, namespace: str, database_url: str) -> None:
    cli = host(
        SimpleNamespace(
            redis_url=redis_url,
            database_url=database_url,
            namespace=namespace,
            audit=AuditSettings(),
        )
    )
    runner = CliRunner()
    result = runner.invoke(cli, ["migrate"])
    assert (
        result.exit_code == 0
        and "applied migrations: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]" in result.output
    ), result.output
    assert "up to date" in runner.invoke(cli, ["migrate"]).output

    asyncio.run(_relay_one_job(redis_url, namespace, database_url))
    result = runner.invoke(cli, ["audit", "show", "cli-job", "--events"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for text in ("reports.daily", "active", "worker-7", "failed", "missing-key", "attempt_started"):
        assert text in result.output, text

    missing = runner.invoke(cli, ["audit", "show", "nope"])
    assert missing.exit_code == 1 and "not in the audit trail" in missing.output

    assert "pending 0" in runner.invoke(cli, ["audit", "lag"]).output
    pruned = runner.invoke(cli, ["audit", "prune", "--months", "1"])
    assert pruned.exit_code == 0 and "dropped 0 partitions" in pruned.output, pruned.output


def test_cli_accepts_a_lazy_resolver(redis_url: str, namespace: str, database_url: str) -> None:
    calls = []

    def resolve() -> SimpleNamespace:
        calls.append(1)
        return SimpleNamespace(
            redis_url=redis_url,
            database_url=database_url,
            namespace=namespace,
            audit=AuditSettings(),
        )

    result = CliRunner().invoke(host(resolve), ["migrate"])
    assert result.exit_code == 0 and calls == [1], result.output


def test_cli_with_an_explicit_resolver(redis_url: str, namespace: str, database_url: str) -> None:
    @click.group()
    def cli() -> None:
        """A host whose ctx.obj is something else entirely."""

    seen: list[object] = []

    def resolve(ctx: click.Context) -> SimpleNamespace:
        seen.append(ctx.find_root().obj)
        return SimpleNamespace(
            redis_url=redis_url,
            database_url=database_url,
            namespace=namespace,
            audit=AuditSettings(),
        )

    register(cli, resolve)
    result = CliRunner().invoke(cli, ["migrate"], obj="host settings")
    assert result.exit_code == 0 and seen == ["host settings"], result.output


def test_horae_audit_with_cluster_enabled_opens_a_cluster_client(
    redis_url: str, namespace: str, database_url: str
) -> None:
    """`[cluster] enabled` with a plain redis:// URL: `horae audit` talks to a Redis Cluster
    (the one client factory), so against this standalone Redis it fails asking for the slot map;
    without the setting the same command reads the outbox."""
    from scheduler.cli.main import cli

    args = ["--redis-url", redis_url, "--database-url", database_url, "--namespace", namespace]
    plain = CliRunner().invoke(cli, [*args, "audit", "lag"])
    assert plain.exit_code == 0 and "pending 0" in plain.output, plain.output
    clustered = CliRunner().invoke(
        cli, [*args, "audit", "lag"], env={"HORAE_CLUSTER__ENABLED": "true"}
    )
    assert clustered.exit_code == 1, clustered.output
    assert "cluster support disabled" in clustered.output, clustered.output
