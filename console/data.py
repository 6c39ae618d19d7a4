"""What the pages and the API show, read from the Scheduler (Redis) and its audit trail
(Postgres). Each read is bounded: counts from the counts hash, pages of a listing, one
job's rows by its index; the audit being down degrades a page, it does not fail it."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from audit.records import AttemptRecord, AuditRecord, OperatorAction
from scheduler.api import Scheduler
from scheduler.core.cron import cron_job_id
from scheduler.core.errors import SchedulerError, StorageError
from scheduler.core.job import CronInfo, JobInfo, JobState
from scheduler.core.timeutil import ms_to_utc, utc_to_ms
from scheduler.core.traceparent import parse_traceparent
from scheduler.facade.listing import every_topic
from scheduler.store.reads import COUNT_KEYS
from scheduler.store.topic_memory import KnownTopic
from scheduler.worker.advertise import WorkerInfo

log = logging.getLogger("horae.console")
STATES = tuple(s.value for s in JobState)  # a job's states (the listing's filter)
COUNTS = COUNT_KEYS  # the keys of a topic's counts: STATES and dead_letter (waiting dead letters)


@dataclass(frozen=True)
class TopicRow:
    """One topic on the overview: its jobs per state in Redis, and its last hour."""

    name: str
    counts: dict[str, int]
    completed_hour: int | None  # None: the audit could not say
    failed_hour: int | None

    @property
    def completed_per_s(self) -> float | None:
        return None if self.completed_hour is None else self.completed_hour / 3600

    @property
    def failed_per_s(self) -> float | None:
        return None if self.failed_hour is None else self.failed_hour / 3600


@dataclass(frozen=True)
class Overview:
    topics: list[TopicRow]
    workers: list[WorkerInfo]
    relay_pending: int | None
    relay_age_s: float | None
    audit_problem: str | None
    at: datetime
    unserved: list[KnownTopic] = field(
        default_factory=list
    )  # known topics whose due jobs wait for a worker


@dataclass(frozen=True)
class JobDetail:
    """A job as Redis holds it (None once pruned) and as the audit remembers it."""

    id: str
    job: JobInfo | None
    record: AuditRecord | None
    attempts: list[AttemptRecord]
    actions: list[OperatorAction]
    trace_id: str | None
    audit_problem: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def topic(self) -> str:
        return self.job.topic if self.job else (self.record.topic if self.record else "")

    @property
    def state(self) -> str:
        if self.job is not None:
            return self.job.state.value
        return str(self.record.status) if self.record else "unknown"


def audit_of(scheduler: Scheduler) -> Any | None:
    """The scheduler's audit trail, or None when this process has none open."""
    try:
        return scheduler.audit
    except SchedulerError:
        return None


async def overview(scheduler: Scheduler) -> Overview:
    """Per topic counts and last hour, live workers, relay lag."""
    counts = await scheduler.stats_by_topic()
    workers = await scheduler.workers()
    unserved = [t for t in await scheduler.known_topics() if t.waiting]
    audit = audit_of(scheduler)
    hour: dict[str, tuple[int, int]] | None = None
    pending = age = None
    problem = None if audit is not None else "the audit trail is off in this process"
    now = ms_to_utc(scheduler.clock.now_ms())  # (the scheduler's clock: a test's fake one too)
    if audit is not None:
        try:
            hour = await audit.finished_since(now - timedelta(hours=1))
            pending, age = await audit.lag()
        except (StorageError, OSError, TimeoutError) as exc:
            problem = f"audit trail unavailable: {exc}"
    names = sorted(set(await every_topic(scheduler)) | set(hour or {}))
    rows = [
        TopicRow(
            n,
            counts.get(n, dict.fromkeys(COUNTS, 0)),
            None if hour is None else hour.get(n, (0, 0))[0],
            None if hour is None else hour.get(n, (0, 0))[1],
        )
        for n in names
    ]
    return Overview(
        rows,
        sorted(workers, key=lambda w: w.id),
        relay_pending=pending,
        relay_age_s=age,
        audit_problem=problem,
        at=now,
        unserved=unserved,
    )


def trace_id_of(job: JobInfo | None, record: AuditRecord | None) -> str | None:
    """The job's trace id: the audit's (from the scheduling call's traceparent), else one
    a caller put in the job's metadata as "traceparent"."""
    if record is not None and record.trace_id:
        return record.trace_id
    meta = (job.metadata if job is not None else None) or {}
    parent = meta.get("traceparent")
    parsed = parse_traceparent(parent) if isinstance(parent, str) else None
    return parsed.trace_id_hex if parsed else None


async def job_detail(scheduler: Scheduler, job_id: str) -> JobDetail | None:
    """The job from Redis and the audit; None when neither knows it."""
    job = await scheduler.get_job(job_id)
    audit = audit_of(scheduler)
    record, attempts, actions, problem = None, [], [], None
    if audit is not None:
        try:
            record = await audit.get(job_id)
            attempts = await audit.attempts(job_id)
            actions = await audit.actions(job_id, 20)
        except (StorageError, OSError, TimeoutError) as exc:
            problem = f"audit trail unavailable: {exc}"
    if job is None and record is None:
        return None
    return JobDetail(
        job_id,
        job,
        record,
        attempts=attempts,
        actions=actions,
        trace_id=trace_id_of(job, record),
        audit_problem=problem,
    )


async def last_tick_states(
    scheduler: Scheduler, schedules: list[CronInfo], audit_lookups: int = 50
) -> dict[str, str]:
    """The state of each schedule's latest tick: its job id is the schedule's name and the
    tick's instant (cron.cron_job_id). One pipelined Redis read for all of them; the audit
    is asked, one job each, for at most `audit_lookups` ticks Redis no longer holds."""
    ids = {
        c.name: cron_job_id(c.name, utc_to_ms(c.last_run_at)) for c in schedules if c.last_run_at
    }
    jobs = await scheduler.store.get_jobs(list(ids.values()))
    out = {name: job.state.value for name, job in zip(ids, jobs) if job is not None}
    audit = audit_of(scheduler)
    gone = [(name, job_id) for (name, job_id), job in zip(ids.items(), jobs) if job is None]
    if audit is not None:
        try:
            for name, job_id in gone[:audit_lookups]:
                record = await audit.get(job_id)
                if record is not None:
                    out[name] = str(record.status)
        except (StorageError, OSError, TimeoutError) as exc:
            log.warning("console: last tick outcomes without the audit (%s)", exc)
    return out


def trace_link(template: str, trace_id: str | None) -> str | None:
    """The trace's URL from the configured template ({trace_id}), or None."""
    if not template or not trace_id:
        return None
    return template.replace("{trace_id}", trace_id)


def pretty_json(value: Any) -> str:
    """A payload or metadata as indented JSON for people (unescaped here: templates escape)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class Analytics:
    """The latest nightly summary found under the report directory."""

    directory: Path
    summary: dict[str, Any]
    baseline: dict[str, float]
    has_html: bool


def latest_summary_dir(report_dir: Path) -> Path | None:
    """The directory of the newest summary.json under `report_dir` (one level down, or itself)."""
    candidates = [
        p for p in [report_dir / "summary.json", *report_dir.glob("*/summary.json")] if p.is_file()
    ]
    if not candidates:
        return None
    return max(candidates, key=lambda p: p.stat().st_mtime).parent


async def analytics(scheduler: Scheduler, report_dir: Path, baseline_days: int) -> Analytics | None:
    """The latest summary with each topic's baseline (mean daily failure rate of the
    `baseline_days` before the summary's window, from the report's Postgres table)."""
    where = latest_summary_dir(report_dir)
    if where is None:
        return None
    summary = json.loads((where / "summary.json").read_text())
    baseline: dict[str, float] = {}
    audit = audit_of(scheduler)
    since = summary.get("window", {}).get("since")
    if audit is not None and isinstance(since, str):
        start = date.fromisoformat(since[:10])
        try:
            baseline = await audit.failure_baseline(start - timedelta(days=baseline_days), start)
        except (StorageError, OSError, TimeoutError) as exc:
            log.warning("console: no failure baseline (%s)", exc)
    for alert in summary.get("alerts", []):  # the report's own baseline where the table has none
        if isinstance(alert.get("baseline_rate"), (int, float)):
            baseline.setdefault(alert["topic"], float(alert["baseline_rate"]))
    return Analytics(where, summary, baseline, (where / "report.html").is_file())
