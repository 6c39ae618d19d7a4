"""`horae workers list` (the live workers, each running or draining) and `horae workers drain ID`
(ask one worker to drain and exit, from any machine: docs/how-to/deploying.md). Thin wrappers over
the Scheduler facade; registered by scheduler/cli/main.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from horae.settings import Settings
from scheduler.api import Scheduler
from scheduler.cli.common import echo_items, no_relay, print_table, warn_renamed, when_text

Run = Callable[[Any], Any]


_COLUMNS = (
    "id",
    "host",
    "pid",
    "topics",
    "concurrency",
    "running",
    "last heartbeat (UTC)",
    "state",
)


def register(cli: click.Group, run: Run, console: Console) -> None:
    """Add `workers list` and `workers drain` to the `horae` command."""

    @cli.group("workers", invoke_without_command=True)
    @click.option(
        "--json", "as_json", is_flag=True, hidden=True, help="Deprecated: `workers list --json`."
    )
    @click.pass_context
    def workers(ctx: click.Context, as_json: bool) -> None:
        """The live workers of the namespace (`workers list`), and asking one to drain."""
        if ctx.invoked_subcommand is not None:
            return
        # `horae workers [--json]` listed them before `workers list` (kept one release).
        warn_renamed("workers" + (" --json" if as_json else ""), "workers list")
        _list(ctx.obj, as_json)

    @workers.command("list")
    @click.option(
        "--json",
        "as_json",
        is_flag=True,
        help='One JSON object {"items": [...], "cursor": null} of the live workers.',
    )
    @click.pass_obj
    def workers_list(settings: Settings, as_json: bool) -> None:
        """The live workers: id, host, pid, topics, concurrency, running attempts, last heartbeat
        and state (running, or draining: it claims no more and exits once its attempts finished)."""
        _list(settings, as_json)

    def _list(settings: Settings, as_json: bool) -> None:
        async def main() -> Any:
            async with Scheduler(settings=no_relay(settings)) as s:
                return await s.workers()

        infos = run(main())
        if as_json:
            echo_items(infos)
            return
        table = Table(*_COLUMNS, title=f"live workers in {settings.namespace}")
        for w in infos:
            topics = "(all topics)" if w.all_topics else ", ".join(w.topics)
            cells = (
                w.id,
                w.host,
                str(w.pid),
                Text(topics),
                str(w.concurrency),
                str(w.running),
                when_text(w.last_heartbeat),
                w.state,
            )
            table.add_row(*cells)
        print_table(console, table)

    @workers.command("drain")
    @click.argument("worker_id")
    @click.pass_obj
    def drain(settings: Settings, worker_id: str) -> None:
        """Ask the live worker WORKER_ID (as `horae workers list` lists it) to drain and exit: at
        its next heartbeat it stops claiming and turns unready, its running attempts get its grace
        ([worker] grace_s) to finish, the rest are released to other workers, and `horae worker`
        exits 0."""

        async def main() -> bool:
            async with Scheduler(settings=no_relay(settings)) as s:
                return await s.drain_worker(worker_id)

        if not run(main()):
            raise click.ClickException(
                f"no live worker {worker_id!r} in namespace {settings.namespace!r} "
                f"(`horae workers list` lists them)"
            )
        click.echo(
            f"{worker_id}: drain requested (it stops claiming at its next heartbeat, then exits)"
        )
