"""`horae jobs list|show|stats|cancel|retry|delete|reschedule` and `horae cron show` (`jobs
flow`: scheduler/cli/flows.py):
find and act on jobs from the terminal (thin wrappers over the Scheduler facade; registered by
scheduler/cli/main.py). Every command takes --json: one JSON document with the field names of the
facade's values (JobInfo, CronInfo), datetimes RFC 3339 UTC with milliseconds, tracebacks as lists
of lines; a list is {"items": [...], "cursor": ...}.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from horae.settings import Settings
from scheduler.api import Scheduler
from scheduler.cli.common import (
    Invalid,
    echo_json,
    error_lines,
    iso,
    mask_urls,
    no_relay,
    print_table,
    to_json,
    when_text,
)
from scheduler.core.errors import InvalidDelay, SchedulerError
from scheduler.core.job import JobInfo, JobState
from scheduler.core.outbox import FAILED_OUTCOMES, INVALID_PAYLOAD
from scheduler.core.progress import LogLine
from scheduler.core.timeutil import ms_to_utc, parse_duration
from scheduler.store.listing import MAX_LIMIT

Run = Callable[[Any], Any]
STATES = [s.value for s in JobState]
DONE = {"cancel": "cancelled", "retry": "retried", "delete": "deleted"}
# Why an operation changes nothing for a job that exists.
REFUSED = {
    "cancel": "only a scheduled, retrying or running job can be cancelled",
    "retry": "only a failed or cancelled job can be retried (not while an attempt is in flight)",
    "delete": "a running job (or a cancelled one whose attempt is in flight) cannot be deleted",
    "reschedule": "only a scheduled or retrying job can be rescheduled (not a held dead letter)",
}


def _when(value: datetime | None) -> str:
    return when_text(value)


def _missing(settings: Settings, job_id: str) -> str:
    return f"no job {job_id!r} in namespace {settings.namespace!r}"


def superseded(info: JobInfo) -> bool:
    """The job completed after the attempt whose error `last_error` holds (an invalid_payload
    completion's last_error is its own refusal, not an earlier error)."""
    return (
        info.state is JobState.COMPLETED
        and bool(info.last_error)
        and info.outcome != INVALID_PAYLOAD
    )


def error_label(info: JobInfo, attempt: int | None) -> str:
    """ "last_error", or what it is when the job completed after it."""
    if not superseded(info):
        return "last_error"
    which = f"attempt {attempt}" if attempt is not None else "an earlier attempt"
    return f"last_error (from {which}, before the job completed)"


_ATTEMPT_COLUMNS = (
    "#",
    "worker",
    "started (UTC)",
    "outcome",
    "ms",
    "late ms",
    "progress",
    "error",
)


def _show_text(console: Console, doc: dict[str, Any], info: JobInfo) -> None:
    table = Table(title=f"job {info.id}", show_header=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value")
    for name in (
        "topic",
        "state",
        "outcome",
        "attempts",
        "max_attempts",
        "run_at",
        "tz",
        "next_attempt_at",
        "created_at",
        "finished_at",
        "key",
        "priority",
        "cron",
        "timeout_ms",
        "backoff_type",
        "backoff_delay_ms",
        "backoff_max_delay_ms",
        "backoff_jitter",
        "deduplicated",
    ):
        value = doc[name]
        table.add_row(name, Text("-" if value is None else str(value)))
    for name in ("payload", "metadata"):
        table.add_row(name, Text(json.dumps(doc[name], indent=1)))
    if info.result is not None:  # what its listeners returned
        table.add_row("result", Text(json.dumps(doc["result"], indent=1)))
    if info.flow is not None:  # a node of a flow: its root, and the tree's command
        root = "this job is its root" if info.flow == info.id else f"its root is {info.flow}"
        table.add_row("flow", Text(f"{root} (the tree: horae jobs flow {info.flow})"))
    if info.parents:  # after= (docs/how-to/dependencies.md); a flow node's are its children
        label = "children (runs after)" if info.flow is not None else "parents"
        table.add_row(label, Text(", ".join(info.parents)))
        if info.state is JobState.WAITING_FOR_PARENTS:
            table.add_row("waiting for", Text(f"{info.waiting_for} of {len(info.parents)}"))
    if info.progress is not None:
        table.add_row(
            "progress", Text(_progress_text(info.progress.percent, info.progress.message))
        )
    if info.logs:
        table.add_row(
            f"logs (last {len(info.logs)})", Text("\n".join(_log_text(line) for line in info.logs))
        )
    error = info.last_error
    if error:
        table.add_row(
            error_label(info, doc["last_error_attempt"]), Text("\n".join(error_lines(error)))
        )
    print_table(console, table)
    if doc["audit_attempts"] is None:
        click.echo(f"attempts from the audit trail: unavailable ({doc['audit_error']})")
        return
    attempts = Table(*_ATTEMPT_COLUMNS, title="attempts (audit)")
    for a in doc["audit_attempts"]:
        error_text = (
            f"{a['error_type']}: {a['error_message']}"
            if a["error_type"] or a["error_message"]
            else ""
        )
        progress = (
            ""
            if a["progress_percent"] is None
            else _progress_text(a["progress_percent"], a["progress_message"])
        )
        cells = (
            str(a["attempt"]),
            a["worker"] or "",
            a["started_at"] or "",
            a["outcome"] or "running",
            "" if a["duration_ms"] is None else str(a["duration_ms"]),
            "" if a["lateness_ms"] is None else str(a["lateness_ms"]),
            Text(progress),
            Text(error_text),
        )
        attempts.add_row(*cells)
    print_table(console, attempts)


def _progress_text(percent: float, message: str | None) -> str:
    return f"{percent:g}%" + (f" {message}" if message else "")


def _log_text(line: str) -> str:
    if isinstance(line, LogLine):
        return f"[{_when(line.at)} #{line.attempt}] {line}"
    return line


def _parse_when(text: str, now_ms: int) -> datetime:
    """WHEN of `reschedule`: a delay from now ("2h", "90s") or an ISO datetime (naive: wall time in
    --tz)."""
    try:
        return ms_to_utc(now_ms + round(parse_duration(text, "WHEN") * 1000))
    except InvalidDelay:
        pass
    except OverflowError:
        raise Invalid(
            f"WHEN {text!r} is past the year 9999; give a delay or datetime before it"
        ) from None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise Invalid(
            f"WHEN must be an ISO datetime such as 2030-01-05T09:00 (naive: "
            f"wall time in --tz) or a delay such as 2h or 90s; got {text!r}"
        ) from None


_LIST_COLUMNS = (
    "id",
    "topic",
    "state",
    "attempts",
    "run at (UTC)",
    "next attempt (UTC)",
    "key",
    "priority",
    "last error",
)


def register(cli: click.Group, run: Run, console: Console) -> None:
    """Add `jobs` and `cron show` to the `horae` command (`workers`: scheduler/cli/workers.py)."""

    @cli.group()
    def jobs() -> None:
        """Find jobs and act on them: list, show, stats, cancel, retry, delete, reschedule; a
        flow's tree (flow)."""

    @jobs.command("list")
    @click.option("--topic", default=None, help="Only jobs of this topic.")
    @click.option(
        "--state", type=click.Choice(STATES), default=None, help="Only jobs in this state."
    )
    @click.option(
        "--limit",
        type=click.IntRange(1, MAX_LIMIT),
        default=100,
        show_default=True,
        help="Jobs per page.",
    )
    @click.option("--cursor", default=None, help="The cursor printed by the previous page.")
    @click.option(
        "--json", "as_json", is_flag=True, help='One JSON object {"items": [...], "cursor": ...}.'
    )
    @click.pass_obj
    def jobs_list(
        settings: Settings,
        topic: str | None,
        state: str | None,
        limit: int,
        cursor: str | None,
        as_json: bool,
    ) -> None:
        """One page of jobs: waiting ones first (highest priority, then earliest), then running,
        completed, failed, cancelled. The next page's cursor is printed after the table."""

        async def main() -> Any:
            async with Scheduler(settings=no_relay(settings)) as s:
                return await s.jobs(topic, state, limit, cursor)

        page = run(main())
        if as_json:
            echo_json({"items": page.items, "cursor": page.cursor})
            return
        title = (
            f"jobs in {settings.namespace}"
            + (f", topic {topic}" if topic else "")
            + (f", {state}" if state else "")
        )
        table = Table(*_LIST_COLUMNS, title=title)
        for j in page.items:
            first_error = (error_lines(j.last_error) or [""])[0]
            cells = (
                j.id,
                j.topic,
                j.state.value,
                f"{j.attempts}/{j.max_attempts}",
                _when(j.run_at),
                _when(j.next_attempt_at),
                j.key or "",
                str(j.priority),
                Text(first_error),
            )
            table.add_row(*cells)
        print_table(console, table)
        if page.cursor:
            click.echo(f"next page: --cursor {page.cursor}")

    @jobs.command("show")
    @click.argument("job_id")
    @click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="One JSON object: the job's fields and its attempts.",
    )
    @click.pass_obj
    def jobs_show(settings: Settings, job_id: str, as_json: bool) -> None:
        """One job as Redis holds it and, when the audit trail is reachable, its attempts."""

        async def main() -> tuple[JobInfo | None, list[Any] | None, str | None]:
            async with Scheduler(settings=settings) as s:
                info = await s.get_job(job_id)
                if info is None:
                    return None, None, None
                try:
                    return info, await s.audit.attempts(job_id), None
                except SchedulerError as exc:
                    return info, None, mask_urls(str(exc))

        info, attempts, audit_error = run(main())
        if info is None:
            raise click.ClickException(_missing(settings, job_id))
        failed = [a.attempt for a in attempts or [] if a.outcome in FAILED_OUTCOMES]
        doc = to_json(info)
        doc.update(
            last_error_attempt=failed[-1] if failed and info.last_error else None,
            last_error_superseded=superseded(info),
            audit_attempts=None if attempts is None else to_json(attempts),
            audit_error=audit_error,
        )
        if as_json:
            echo_json(doc)
        else:
            _show_text(console, doc, info)

    @jobs.command("stats")
    @click.option("--topic", default=None, help="Only jobs of this topic.")
    @click.option(
        "--json", "as_json", is_flag=True, help='One JSON object {"<state>": count, ...}.'
    )
    @click.pass_obj
    def jobs_stats(settings: Settings, topic: str | None, as_json: bool) -> None:
        """Jobs per state currently in Redis."""

        async def main() -> tuple[dict[str, int], list[Any]]:
            async with Scheduler(settings=no_relay(settings)) as s:
                return await s.stats(topic), [] if as_json else await s.known_topics()

        counts, known = run(main())
        if as_json:
            echo_json(counts)
            return
        table = Table(
            "state",
            "jobs",
            title=f"namespace {settings.namespace}" + (f", topic {topic}" if topic else ""),
        )
        for state, n in counts.items():
            table.add_row(state, str(n))
        print_table(console, table)
        for t in known:  # known topics no live worker serves (scheduler/store/topic_memory.py)
            if t.waiting and topic in (None, t.topic):
                since = when_text(t.waiting_since)
                click.echo(
                    f"unserved: {t.waiting} due jobs of topic {t.topic} wait for a worker "
                    f"since {since} (last served {when_text(t.last_served)} by {t.app})"
                )

    for verb in ("cancel", "retry", "delete"):
        _operation(jobs, run, verb)

    @jobs.command("reschedule")
    @click.argument("job_id")
    @click.argument("when")
    @click.option(
        "--tz",
        default="UTC",
        show_default=True,
        help="IANA zone of a naive WHEN (kept with the job).",
    )
    @click.option(
        "--json", "as_json", is_flag=True, help='One JSON object {"id", "changed", "run_at", "tz"}.'
    )
    @click.pass_obj
    def jobs_reschedule(settings: Settings, job_id: str, when: str, tz: str, as_json: bool) -> None:
        """Move a scheduled or retrying job to WHEN: an ISO datetime (naive: wall time in --tz;
        past: now) or a delay from now such as 90s, 2h, 1d."""

        async def main() -> JobInfo | None:
            async with Scheduler(settings=no_relay(settings)) as s:
                run_at = _parse_when(when, s.clock.now_ms())
                if await s.reschedule(job_id, run_at, tz):
                    return await s.get_job(job_id)
                info = await s.get_job(job_id)
                if info is None:
                    raise click.ClickException(_missing(settings, job_id))
                raise click.ClickException(
                    f"{job_id}: not rescheduled: it is {info.state.value}; {REFUSED['reschedule']}"
                )

        info = run(main())
        run_at = info.run_at if info is not None else None
        if as_json:
            echo_json({"id": job_id, "changed": True, "run_at": run_at, "tz": tz})
            return
        local = (
            f" ({run_at.astimezone(ZoneInfo(tz)):%Y-%m-%d %H:%M:%S %Z})"
            if run_at and tz != "UTC"
            else ""
        )
        click.echo(f"{job_id}: rescheduled to {iso(run_at)}{local}")

    cron = cli.commands["cron"]
    assert isinstance(cron, click.Group)

    @cron.command("show")
    @click.argument("name")
    @click.option("--json", "as_json", is_flag=True, help="One JSON object of the schedule.")
    @click.pass_obj
    def cron_show(settings: Settings, name: str, as_json: bool) -> None:
        """One schedule: expression or interval, zone, topic, declared in code or not, next and last
        run, misfire, paused, payload."""

        async def main() -> Any:
            async with Scheduler(settings=no_relay(settings)) as s:
                return await s.get_cron(name)

        info = run(main())
        if info is None:
            raise click.ClickException(
                f"no cron schedule named {name!r} in namespace {settings.namespace!r}"
            )
        if as_json:
            echo_json(info)
            return
        nxt = info.next_run_at
        table = Table(title=f"cron schedule {name}", show_header=False)
        table.add_column("field", style="bold", no_wrap=True)
        table.add_column("value")
        for field, value in (
            ("every" if info.every else "cron", info.trigger.removeprefix("every ")),
            ("zone", info.tz),
            ("topic", info.topic),
            (
                "declared",
                "in code, beside its listeners (@on_event)"
                if info.declared
                else "no (schedule_cron)",
            ),
            (
                "next run (zone)",
                nxt.astimezone(ZoneInfo(info.tz)).strftime("%Y-%m-%d %H:%M:%S %Z") if nxt else "-",
            ),
            ("next run (UTC)", _when(nxt)),
            ("last run (UTC)", _when(info.last_run_at)),
            ("misfire", info.misfire),
            ("paused", "yes" if info.paused else "no"),
            ("max attempts", str(info.max_attempts)),
            ("payload", json.dumps(info.payload)),
            ("metadata", json.dumps(dict(info.metadata))),
        ):
            table.add_row(field, Text(value))
        print_table(console, table)


def _operation(jobs: click.Group, run: Run, verb: str) -> None:
    """`jobs cancel|retry|delete ID...`: one line per id; exit 1 when any id was not changed."""

    @jobs.command(
        verb,
        help={
            "cancel": (
                "Cancel jobs: a waiting or retrying job never runs again; "
                "a running attempt finishes but the job ends cancelled."
            ),
            "retry": (
                "Run failed or cancelled jobs again, due now, with a fresh budget of attempts."
            ),
            "delete": "Delete jobs that are not running (their ids are free again).",
        }[verb],
    )
    @click.argument("ids", nargs=-1, required=True)
    @click.option(
        "--json",
        "as_json",
        is_flag=True,
        help='One JSON object {"results": [{"id", "changed", "state", "error"}]}.',
    )
    @click.pass_context
    def command(ctx: click.Context, ids: tuple[str, ...], as_json: bool) -> None:
        settings: Settings = ctx.obj
        unique = list(dict.fromkeys(ids))

        async def main() -> list[dict[str, Any]]:
            async with Scheduler(settings=no_relay(settings)) as s:
                before = {i: await s.get_job(i) for i in unique}
                changed = await _act(s, verb, [i for i in unique if before[i] is not None])
                results = []
                for i in unique:
                    after = await s.get_job(i)
                    ok, was = i in changed, before[i]
                    error = (
                        None
                        if ok
                        else _missing(settings, i)
                        if was is None
                        else f"{i}: not {DONE[verb]}: it is "
                        f"{(after or was).state.value}; {REFUSED[verb]}"
                    )
                    results.append(
                        {
                            "id": i,
                            "changed": ok,
                            "state": after.state.value if after else None,
                            "error": error,
                        }
                    )
                return results

        results = run(main())
        if as_json:
            echo_json({"results": results})
        else:
            for r in results:
                if r["changed"]:
                    click.echo(f"{r['id']}: {DONE[verb]}")
                else:
                    click.echo(f"Error: {r['error']}", err=True)
        if not all(r["changed"] for r in results):
            ctx.exit(1)


async def _act(s: Scheduler, verb: str, ids: list[str]) -> set[str]:
    """The ids the operation changed (cancel: one cancel_many call, then each job's state read
    back)."""
    if verb == "cancel":
        states = {i: (await s.get_job(i)) for i in ids}
        waiting = [i for i in ids if (job := states[i]) is not None and not job.state.terminal]
        if not await s.cancel_many(waiting):
            return set()
        after = {i: await s.get_job(i) for i in waiting}
        return {
            i for i in waiting if (job := after[i]) is not None and job.state is JobState.CANCELLED
        }
    op: Callable[[str], Awaitable[bool]] = s.retry if verb == "retry" else s.delete
    return {i for i in ids if await op(i)}
