"""`horae dlq`: the dead-letter topics; list, replay, delete and purge the dead letters of one
(thin wrappers over the Scheduler facade; registered by scheduler/cli/main.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from horae.settings import Settings
from scheduler.api import Scheduler
from scheduler.cli.common import echo_items, no_relay, print_table, when_text
from scheduler.core.job import JobInfo

Run = Callable[[Any], Any]


def _doc(dl: JobInfo) -> dict[str, Any]:
    """A dead letter as `dlq list --json` prints it: id, payload and metadata, and the metadata's
    source and failure fields on their own (failed_at an instant, so it prints as every other)."""
    m = dl.metadata
    failed_at = m.get("failed_at")
    try:
        when = datetime.fromisoformat(str(failed_at).replace("Z", "+00:00")) if failed_at else None
    except ValueError:
        when = None
    return {
        "id": dl.id,
        "topic": dl.topic,
        "payload": dl.payload,
        "metadata": dict(m),
        "source_topic": m.get("source_topic"),
        "source_job_id": m.get("source_job_id"),
        "failed_at": when,
        "attempts": m.get("attempts"),
        "error_type": m.get("error_type"),
        "error": m.get("error"),
        "created_at": dl.created_at,
    }


async def _all_ids(s: Scheduler, topic: str) -> list[str]:
    ids: list[str] = []
    cursor: str | None = None
    while True:
        page = await s.dead_letters(topic, 1_000, cursor)
        ids += [dl.id for dl in page.items]
        cursor = page.cursor
        if cursor is None:
            return ids


async def _chosen(
    s: Scheduler, topic: str, ids: tuple[str, ...], all_: bool, verb: str, yes: bool
) -> list[str]:
    """The dead letters to act on: the given ids (each must be held on `topic`), or every one with
    --all (after a confirmation unless --yes)."""
    if bool(ids) == all_:
        raise click.UsageError("give dead-letter ids or --all (not both)")
    if not all_:
        for job_id in ids:
            if await s.store.held_dead_letter_topic(job_id) != topic:
                raise click.ClickException(f"no dead letter {job_id!r} on topic {topic!r}")
        return list(dict.fromkeys(ids))
    chosen = await _all_ids(s, topic)
    if chosen and not yes:
        click.confirm(f"{verb} all {len(chosen)} dead letters of {topic!r}?", abort=True)
    return chosen


_DLQ_COLUMNS = (
    "id",
    "source topic",
    "source job",
    "failed at",
    "attempts",
    "error",
)


def register(cli: click.Group, run: Run, console: Console) -> None:
    """Add the `dlq` group to the `horae` command."""

    @cli.group()
    def dlq() -> None:
        """Dead letters: jobs that failed for good, copied to their topic's dead-letter topic."""

    @dlq.command("list")
    @click.argument("topic")
    @click.option(
        "--limit",
        type=click.IntRange(1, 1_000),
        default=100,
        show_default=True,
        help="Dead letters per page.",
    )
    @click.option("--cursor", default=None, help="Cursor printed by the previous page.")
    @click.option(
        "--json",
        "as_json",
        is_flag=True,
        help='One JSON object {"items": [...], "cursor": ...} instead of a table.',
    )
    @click.pass_obj
    def dlq_list(
        settings: Settings, topic: str, limit: int, cursor: str | None, as_json: bool
    ) -> None:
        """List the dead letters of TOPIC, oldest first (one page; the next page's cursor is
        printed; `horae dlq topics` lists the dead-letter topics)."""

        async def main() -> Any:
            async with Scheduler(settings=no_relay(settings)) as s:
                return await s.dead_letters(topic, limit, cursor)

        page = run(main())
        if as_json:
            echo_items([_doc(dl) for dl in page.items], page.cursor)
            return
        table = Table(*_DLQ_COLUMNS, title=f"dead letters of {topic}")
        for dl in page.items:
            d = _doc(dl)
            cells = (
                dl.id,
                str(d["source_topic"]),
                str(d["source_job_id"]),
                when_text(d["failed_at"]),
                str(d["attempts"]),
                f"{d['error_type']}: {d['error']}",
            )
            table.add_row(*cells)
        print_table(console, table)
        if page.cursor:
            click.echo(f"next page: --cursor {page.cursor}")

    @dlq.command("topics")
    @click.option(
        "--json",
        "as_json",
        is_flag=True,
        help=(
            'One JSON object {"items": [{"topic", "count"}], '
            '"cursor": null} (as GET /api/v1/dead-letters) '
            "instead of a table."
        ),
    )
    @click.pass_obj
    def dlq_topics(settings: Settings, as_json: bool) -> None:
        """The dead-letter topics and how many dead letters wait in each (the TOPIC of
        `dlq list`)."""

        async def main() -> list[dict[str, Any]]:
            async with Scheduler(settings=no_relay(settings)) as s:
                names = await s.store.dead_letter_topics()
                counts = await asyncio.gather(*(s.store.dead_letter_count(n) for n in names))
            return [{"topic": n, "count": c} for n, c in zip(names, counts, strict=True)]

        rows = run(main())
        if as_json:
            echo_items(rows)
            return
        table = Table(
            "dead-letter topic", "dead letters", title=f"dead-letter topics in {settings.namespace}"
        )
        for row in rows:
            table.add_row(row["topic"], str(row["count"]))
        print_table(console, table)

    for verb in ("replay", "delete"):
        _bulk_command(dlq, run, verb)

    @dlq.command("purge")
    @click.argument("topic")
    @click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
    @click.pass_obj
    def dlq_purge(settings: Settings, topic: str, yes: bool) -> None:
        """Delete every dead letter of TOPIC (asks first)."""
        if not yes:
            click.confirm(f"Delete every dead letter of {topic!r}?", abort=True)

        async def main() -> None:
            async with Scheduler(settings=settings) as s:
                click.echo(f"purged {await s.purge_dead_letters(topic)} dead letters of {topic}")

        run(main())


_HELP = {
    "replay": (
        "Schedule dead letters' payloads again on their "
        "source topic (new jobs, due now) and remove them."
    ),
    "delete": "Delete dead letters of TOPIC.",
}


def _bulk_command(dlq: click.Group, run: Run, verb: str) -> None:
    """`dlq replay` / `dlq delete`: TOPIC (ID... | --all [--yes])."""

    @dlq.command(verb, help=_HELP[verb])
    @click.argument("topic")
    @click.argument("ids", nargs=-1)
    @click.option(
        "--all",
        "all_",
        is_flag=True,
        help=f"{verb.capitalize()} every dead letter of TOPIC (asks first).",
    )
    @click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
    @click.pass_obj
    def command(
        settings: Settings, topic: str, ids: tuple[str, ...], all_: bool, yes: bool
    ) -> None:
        async def main() -> None:
            async with Scheduler(settings=settings) as s:
                chosen = await _chosen(s, topic, ids, all_=all_, verb=verb.capitalize(), yes=yes)
                if verb == "replay":
                    for job_id in chosen:
                        click.echo(f"{job_id} -> {await s.replay(job_id)}")
                else:
                    deleted = sum([await s.delete(job_id) for job_id in chosen])
                    click.echo(f"deleted {deleted} dead letters of {topic}")

        run(main())
