"""`horae partitions`: the namespace's partition layout (`status`) and the offline migration to
another count (`migrate --to N`; scheduler/migration.py, README: Scaling out). Registered by
scheduler/cli.py. These commands connect without a store: a store's connect is refused while
the count differs or a migration runs, which is exactly when they are needed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import click

from scheduler.config import Settings
from scheduler.partitions import MAX_PARTITIONS

Run = Callable[[Any], Any]


@asynccontextmanager
async def _opened(settings: Settings) -> AsyncIterator[tuple[Any, Callable[[], int]]]:
    """The namespace's MigrationStore and the Redis server's clock."""
    from scheduler.clock import SystemClock
    from scheduler.connection import redis_client
    from scheduler.datadir import data_dir_of
    from scheduler.servers import resolve_services
    from scheduler.store_migrate import MigrationStore

    urls = await asyncio.to_thread(resolve_services, settings.redis_url, settings.database_url,
                                   data_dir_of(settings), need_database=False)
    redis = redis_client(urls.redis_url, settings)
    store = MigrationStore(redis, settings.namespace)
    try:
        clock = SystemClock()
        await clock.calibrate(redis)
        yield store, clock.now_ms
    finally:
        await store.aclose()
        await redis.aclose()


def register(cli: click.Group, run: Run) -> None:
    """Add the `partitions` group to the root command."""

    @cli.group("partitions")
    def partitions() -> None:
        """The namespace's partitions (README: Scaling out): its stored count, and moving it to another."""

    @partitions.command("status")
    @click.pass_obj
    def status(settings: Settings) -> None:
        """The stored partition count, this configuration's, a migration in progress and each partition's jobs."""
        from scheduler.migration_checks import status_lines

        async def main() -> list[str]:
            async with _opened(settings) as (store, _):
                return await status_lines(store, settings.cluster.partitions)

        for line in run(main()):
            click.echo(line)

    @partitions.command("migrate")
    @click.option("--to", "to", required=True, type=click.IntRange(1, MAX_PARTITIONS),
                  help=f"The new partition count (1..{MAX_PARTITIONS}; 1: the unpartitioned layout).")
    @click.option("--dry-run", is_flag=True, help="Only print what would move and what would refuse the run.")
    @click.pass_obj
    def migrate(settings: Settings, to: int, dry_run: bool) -> None:
        """Move every job, schedule and topic configuration to the partitions of a new count.

        Offline: stop every worker and producer and relay the audit outbox first (the command
        refuses otherwise, saying which). Resumable: while it runs every process is refused;
        after a crash run it again and it finishes. Then start every process with the new count."""
        from audit.stream import GROUP
        from scheduler.migration import Migration, run_by

        async def main() -> list[str]:
            async with _opened(settings) as (store, now_ms):
                migration = Migration(store, to, run_by(), now_ms, click.echo, GROUP)
                summary = await migration.run(dry_run=dry_run)
                return summary.lines("would move" if dry_run else "moved")

        for line in run(main()):
            click.echo(line)
