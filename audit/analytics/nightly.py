"""The nightly report, run in a subprocess so the worker's event loop is never
blocked (Spark's JVM and the export's CPU work stay out of the worker): the
`horae.audit.nightly` cron listener calls `run_report_async` (or
`run_report_subprocess` from a thread)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final

from audit.analytics.window import check_zone
from listeners import ScheduleArrivedEvent

if TYPE_CHECKING:
    from scheduler import Scheduler

NIGHTLY_TOPIC: Final = "horae.audit.nightly"


def nightly_window(fired_at: datetime, zone: str) -> tuple[date, date]:
    """(since, until) of a nightly run that fired at `fired_at`: the previous day in `zone`."""
    day = fired_at.astimezone(check_zone(zone)).date() - timedelta(days=1)
    return day, day


def report_command(
    since: date, until: date, out: str | Path, master: str | None = None, extra: Sequence[str] = ()
) -> list[str]:
    """argv of `python -m audit.analytics` for a window (the database URL goes in the
    environment)."""
    argv = [
        sys.executable,
        "-m",
        "audit.analytics",
        "--since",
        since.isoformat(),
        "--until",
        until.isoformat(),
        "--out",
        str(out),
    ]
    if master:
        argv += ["--master", master]
    return [*argv, *extra]


def _env(database_url: str, env: Mapping[str, str] | None) -> dict[str, str]:
    # The URL may hold a password: pass it in the environment, not on the command line (ps shows
    # argv).
    return {**(os.environ if env is None else env), "HORAE_DATABASE_URL": database_url}


def run_report_subprocess(
    database_url: str,
    since: date,
    until: date,
    out: str | Path,
    master: str | None = None,
    *,
    extra: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float | None = 3600,
    cwd: str | Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the whole report (export, analyze, publish) in a child Python process and wait.

    Blocking: from async code use `run_report_async`, or
    `asyncio.to_thread(run_report_subprocess, ...)`.

    Args:
        database_url: the audit database (handed over as HORAE_DATABASE_URL).
        since, until: the report's days (inclusive).
        out: output directory (summary.json, report.html, aggregates/).
        master: Spark master (None: the config's, local[*] by default).
        extra: more `horae report` options, e.g. ["--zone", "Europe/Paris"].
        env: the child's environment (default: this process's).
        timeout: seconds before the child is killed (subprocess.TimeoutExpired).
        cwd: the child's working directory.

    Returns:
        The finished process, stdout and stderr captured as text; check `returncode`.
    """
    return subprocess.run(
        report_command(since, until, out, master, extra),
        env=_env(database_url, env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        check=False,
    )


async def run_report_async(
    database_url: str,
    since: date,
    until: date,
    out: str | Path,
    master: str | None = None,
    *,
    extra: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float | None = 3600,
    cwd: str | Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """`run_report_subprocess` without blocking the event loop (asyncio subprocess).

    Raises:
        TimeoutError: after `timeout` seconds (the child is killed first).
    """
    argv = report_command(since, until, out, master, extra)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=_env(database_url, env),
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout)
    except (TimeoutError, asyncio.CancelledError):
        proc.kill()
        await proc.wait()
        raise
    return subprocess.CompletedProcess(
        argv, proc.returncode or 0, stdout.decode(errors="replace"), stderr.decode(errors="replace")
    )


async def install_nightly(scheduler: Scheduler) -> str:
    """Schedule horae.audit.nightly with the cron feature and register its listener;
    return one line saying so (the worker prints it).

    Called by `horae worker` (the composition root) only when asked (`--nightly` or
    `[analytics] nightly = true`):
    the upsert is idempotent, so every worker may call it; the tick is an ordinary,
    audited job, and the listener runs the pipeline in a subprocess so the worker's
    event loop is never blocked. A failed report fails the attempt (and retries).
    """
    from audit.analytics.options import AnalyticsConfig

    conf = scheduler.settings.analytics
    database_url = scheduler.services.database_url
    # The child reads no config of ours: hand it this process's dataset and zone.
    extra = (
        "--dataset",
        AnalyticsConfig.from_settings(scheduler.settings).dataset,
        "--zone",
        conf.zone,
    )

    async def nightly_report(event: ScheduleArrivedEvent) -> None:
        since, until = nightly_window(event.run_at, conf.zone)
        out = Path(conf.report_dir) / f"nightly-{since.isoformat()}"
        proc = await run_report_async(
            database_url,
            since,
            until,
            out,
            conf.master,
            extra=extra,
            timeout=conf.nightly_timeout_s,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"horae report exited {proc.returncode}: {proc.stderr.strip()[-2000:]}"
            )

    scheduler.registry.add(NIGHTLY_TOPIC, nightly_report)
    await scheduler.schedule_cron(
        NIGHTLY_TOPIC,
        conf.nightly_cron,
        topic=NIGHTLY_TOPIC,
        tz=conf.nightly_tz,
        timeout=conf.nightly_timeout_s,
        retry={"attempts": 2, "backoff": {"type": "fixed", "delay": 600_000}},
    )
    return (
        f"nightly analytics on: cron {NIGHTLY_TOPIC} ({conf.nightly_cron} {conf.nightly_tz}) "
        f"in namespace {scheduler.settings.namespace!r}, reports under {conf.report_dir}/; "
        f"`horae cron delete {NIGHTLY_TOPIC}` drops it"
    )
