"""`horae partitions`: the namespace's partition layout (`status`) and the offline migration to
another count (`migrate --to N`; scheduler/ops/migration.py, docs/how-to/scaling-out.md).
Registered by scheduler/cli/main.py. These commands connect without a store: a store's connect
is refused while the count differs or a migration runs, which is exactly when they are needed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import click

from horae.settings import Settings
from scheduler.cli.common import mask_urls
from scheduler.store.partitions import MAX_PARTITIONS

Run = Callable[[Any], Any]


@asynccontextmanager
async def _opened(settings: Settings) -> AsyncIterator[tuple[Any, Callable[[], int]]]:
    """The namespace's MigrationStore and the Redis server's clock."""
    from scheduler.ops.connection import open_redis
    from scheduler.ops.migrate_store import MigrationStore

    _, redis, clock = await open_redis(settings, None, need_database=False)
    store = MigrationStore(redis, settings.namespace)
    try:
        yield store, clock.now_ms
    finally:
        await store.aclose()
        await redis.aclose()


async def _record(settings: Settings, redis: Any, by: str, summary: Any) -> None:
    """The migration as an operator action in the audit, when the audit is on and its database
    named (no embedded server is started for it); a failure is a warning: the move is done."""
    if not (settings.audit.enabled and settings.database_url) or summary.old == summary.new:
        return
    from audit.options import RelayOptions
    from audit.reader import AuditTrail

    detail = {
        "from": summary.old,
        "to": summary.new,
        "jobs": sum(summary.jobs.values()),
        "schedules": sum(summary.schedules.values()),
    }
    try:
        async with AuditTrail(
            redis,
            settings.namespace,
            settings.database_url,
            RelayOptions.from_settings(settings.audit, partitions=summary.new),
        ) as trail:
            await trail.record_action(
                by,
                "operator",
                action="partitions.migrate",
                target=settings.namespace,
                outcome="done",
                detail=detail,
            )
    except Exception as exc:  # noqa: BLE001 - any failure of the audit leaves the migration done
        click.echo(
            mask_urls(
                f"warning: the audit did not record the migration ({type(exc).__name__}: {exc})"
            ),
            err=True,
        )


def register(cli: click.Group, run: Run) -> None:
    """Add the `partitions` group to the root command."""

    @cli.group("partitions")
    def partitions() -> None:
        """The namespace's partitions (docs/how-to/scaling-out.md): its stored count, and moving
        it to another."""

    @partitions.command("status")
    @click.pass_obj
    def status(settings: Settings) -> None:
        """The stored partition count, this configuration's, a migration in progress and each
        partition's jobs."""
        from scheduler.ops.migration_checks import status_lines

        async def main() -> list[str]:
            async with _opened(settings) as (store, _):
                return await status_lines(store, settings.cluster.partitions)

        for line in run(main()):
            click.echo(line)

    @partitions.command("migrate")
    @click.option(
        "--to",
        "to",
        required=True,
        type=click.IntRange(1, MAX_PARTITIONS),
        help=f"The new partition count (1..{MAX_PARTITIONS}; 1: the unpartitioned layout).",
    )
    @click.option(
        "--dry-run", is_flag=True, help="Only print what would move and what would refuse the run."
    )
    @click.pass_obj
    def migrate(settings: Settings, to: int, dry_run: bool) -> None:
        """Move every job, schedule and topic configuration to the partitions of a new count.

        Offline: stop every worker and producer and relay the audit outbox first (the command
        refuses otherwise, saying which). Resumable: while it runs every process is refused;
        after a crash run it again and it finishes. Then start every process with the new count."""
        from audit.relay.stream import GROUP
        from scheduler.ops.migration import Migration, run_by

        async def main() -> list[str]:
            async with _opened(settings) as (store, now_ms):
                by = run_by()
                migration = Migration(
                    store, to, by=by, now_ms=now_ms, say=click.echo, outbox_group=GROUP
                )
                summary = await migration.run(dry_run=dry_run)
                if not dry_run:
                    await _record(settings, store.redis, by, summary)
                return summary.lines("would move" if dry_run else "moved")

        for line in run(main()):
            click.echo(line)
