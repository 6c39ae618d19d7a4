"""What the pages and the API show, read from the Scheduler (Redis) and its audit trail
(Postgres). Each read is bounded: counts from the counts hash, pages of a listing, one
job's rows by its index; the audit being down degrades a page, it does not fail it."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from audit.records import AttemptRecord, AuditRecord, OperatorAction
from console.timeline import Timeline, build
from scheduler.api import Scheduler
from scheduler.core.cron import cron_job_id, fires_between, trigger_of
from scheduler.core.errors import ScheduleError, SchedulerError, StorageError
from scheduler.core.job import CronInfo, JobInfo, JobState
from scheduler.core.timeutil import ms_to_utc, utc_to_ms
from scheduler.core.traceparent import parse_traceparent
from scheduler.facade.listing import every_topic
from scheduler.store.reads import COUNT_KEYS
from scheduler.store.topic_memory import KnownTopic
from scheduler.worker.advertise import WorkerInfo

log = logging.getLogger("horae.console")
MAX_HISTORY_SPAN_MS = 2 * 366 * 86_400_000  # a schedule's history looks back two years at most
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

    @property
    def announcement(self) -> str:
        """What a screen reader is told when it changes (console.js, the page's live region):
        the counts an operator acts on, not the ones that move with every job that runs."""
        totals = {
            k: sum(t.counts.get(k, 0) for t in self.topics)
            for k in ("failed", "retrying", "dead_letter")
        }
        hour = [t.failed_hour for t in self.topics if t.failed_hour is not None]
        return (
            acted_on(totals)
            + (f"; {sum(hour):,} failed in the last hour" if hour else "")
            + f"; {plural(len(self.workers), 'live worker')}"
        )


def plural(n: int, noun: str) -> str:
    """`n` and `noun`, with an s unless n is 1 ("1 failed job", "2 dead letters")."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def acted_on(counts: Mapping[str, int]) -> str:
    """The counts an operator acts on, as the live region says them: "2 failed jobs, 1 retrying,
    1 dead letter" (the overview's and a topic page's announcements)."""
    return (
        f"{plural(counts.get('failed', 0), 'failed job')}, {counts.get('retrying', 0):,} "
        f"retrying, {plural(counts.get('dead_letter', 0), 'dead letter')}"
    )


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
    timeline: Timeline | None = None  # (job_detail always sets it)

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


@dataclass(frozen=True)
class DeadLetterTopic:
    """A dead-letter topic and how many letters it holds now."""

    topic: str
    count: int


async def dead_letter_topics(scheduler: Scheduler) -> list[DeadLetterTopic]:
    """Every dead-letter topic that holds or held letters, by name: the set the engine keeps of
    them, then one count each (concurrently), so the page lists them without a topic picked."""
    store = scheduler.store
    names = await store.dead_letter_topics()
    counts = await asyncio.gather(*(store.dead_letter_count(t) for t in names))
    return [DeadLetterTopic(t, n) for t, n in zip(names, counts, strict=True)]


@dataclass(frozen=True)
class JobRow:
    """A job as the jobs list shows it, from Redis (`in_redis`) or, past retention, the audit."""

    id: str
    topic: str
    state: str
    key: str
    run_at: datetime | None
    attempts: int
    max_attempts: int | None
    error: str
    in_redis: bool

    @classmethod
    def of_job(cls, j: JobInfo) -> JobRow:
        err = j.last_error or {}
        text = f"{err.get('type')}: {err.get('message') or ''}" if err else ""
        return cls(
            id=j.id,
            topic=j.topic,
            state=j.state.value,
            key=j.key or "",
            run_at=j.run_at,
            attempts=j.attempts,
            max_attempts=j.max_attempts,
            error=text,
            in_redis=True,
        )

    @classmethod
    def of_record(cls, r: AuditRecord) -> JobRow:
        err = r.last_error or {}
        text = f"{err.get('type')}: {err.get('message') or ''}" if err else ""
        return cls(
            id=r.id,
            topic=r.topic,
            state=str(r.status),
            key="",
            run_at=r.run_at,
            attempts=r.attempts,
            max_attempts=r.max_attempts,
            error=text,
            in_redis=False,
        )


@dataclass(frozen=True)
class PayloadMatch:
    """A payload field to match: `path` (keys joined by dots) equal to `value` (its JSON text,
    or the text of a string)."""

    path: tuple[str, ...]
    value: str

    @classmethod
    def parse(cls, text: str) -> PayloadMatch | None:
        """`field.sub=value`; None when empty.

        Raises:
            ScheduleError: field "payload", naming the form it takes.
        """
        text = text.strip()
        if not text:
            return None
        path, sep, value = text.partition("=")
        keys = tuple(k.strip() for k in path.split("."))
        if not sep or not all(keys) or len(text) > 500:
            raise ScheduleError(
                "payload must be field=value (nested fields joined by dots, like "
                f"order.status=paid; 500 characters at most); got {text[:100]!r}",
                field="payload",
            )
        return cls(keys, value.strip())

    def matches(self, payload: Any) -> bool:
        """Whether `payload` holds the field with that value."""
        for key in self.path:
            if isinstance(payload, dict) and key in payload:
                payload = payload[key]
            elif isinstance(payload, list) and key.isdigit() and int(key) < len(payload):
                payload = payload[int(key)]
            else:
                return False
        if isinstance(payload, str):
            return payload == self.value or json.dumps(payload) == self.value
        return json.dumps(payload, sort_keys=True, default=str) == self.value


@dataclass(frozen=True)
class JobFilter:
    """The jobs list's filters beside the id prefix, applied to the jobs of a page."""

    topic: str = ""
    state: str = ""
    key: str = ""
    payload: PayloadMatch | None = None

    def keeps(self, job: JobInfo | None, record: AuditRecord | None) -> bool:
        """Whether the job (as Redis holds it, else as the audit does) passes every filter."""
        topic = job.topic if job else (record.topic if record else "")
        state = job.state.value if job else (str(record.status) if record else "")
        payload = job.payload if job else (record.payload if record else None)
        return (
            (not self.topic or topic == self.topic)
            and (not self.state or state == self.state)
            and (not self.key or (job is not None and job.key == self.key))
            and (self.payload is None or self.payload.matches(payload))
        )


async def jobs_by_id_prefix(
    scheduler: Scheduler, prefix: str, after: str, limit: int, keep: JobFilter
) -> tuple[list[JobRow], str | None]:
    """A page of the jobs whose id starts with `prefix` as the jobs list shows them
    (jobs_with_id_prefix), and the next page's cursor."""
    found, following = await jobs_with_id_prefix(scheduler, prefix, after, limit, keep)
    rows = [JobRow.of_job(j) if j is not None else JobRow.of_record(r) for r, j in found]
    return rows, following


async def jobs_with_id_prefix(
    scheduler: Scheduler, prefix: str, after: str, limit: int, keep: JobFilter
) -> tuple[list[tuple[AuditRecord, JobInfo | None]], str | None]:
    """A page of the jobs whose id starts with `prefix` (the audit's index of every job, by id)
    that `keep` keeps, each as the audit and Redis (None: past its retention) hold it, and the
    next page's cursor (the last id examined: a filter keeping few gives a short page that goes
    on).

    Raises:
        StorageError: no audit trail in this process, or it is unreachable (the search needs it).
    """
    audit = audit_of(scheduler)
    if audit is None:
        raise StorageError("an id prefix search needs the audit trail, which is off here")
    records = await audit.by_id_prefix(prefix, after, limit)
    live = await scheduler.store.get_jobs([r.id for r in records]) if records else []
    found = [(r, j) for r, j in zip(records, live, strict=True) if keep.keeps(j, r)]
    return found, (records[-1].id if len(records) == limit else None)


def trace_id_of(job: JobInfo | None, record: AuditRecord | None) -> str | None:
    """The job's trace id: the audit's (from the scheduling call's traceparent), else one
    a caller put in the job's metadata as "traceparent"."""
    if record is not None and record.trace_id:
        return record.trace_id
    meta = (job.metadata if job is not None else None) or {}
    parent = meta.get("traceparent")
    parsed = parse_traceparent(parent) if isinstance(parent, str) else None
    return parsed.trace_id_hex if parsed else None


async def job_exists(scheduler: Scheduler, job_id: str) -> bool:
    """Whether Redis or the audit knows a job of exactly this id (the search box's first try)."""
    if await scheduler.get_job(job_id) is not None:
        return True
    audit = audit_of(scheduler)
    if audit is None:
        return False
    try:
        return await audit.get(job_id) is not None
    except (StorageError, OSError, TimeoutError):
        return False


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
    now = ms_to_utc(scheduler.clock.now_ms())  # (the scheduler's clock: a test's fake one too)
    return JobDetail(
        job_id,
        job,
        record,
        attempts=attempts,
        actions=actions,
        trace_id=trace_id_of(job, record),
        audit_problem=problem,
        timeline=build(job, record, attempts, now),
    )


@dataclass(frozen=True)
class Tick:
    """One recent fire of a schedule and the state of its job (cron.cron_job_id)."""

    at: datetime
    job_id: str
    state: str


def recent_fires(schedule: CronInfo, count: int) -> list[int]:
    """The last `count` fire instants (epoch ms) of `schedule` up to its last run, newest first.

    Fires are only computed forwards (cron.fires_between), so the window before the last run
    doubles from one second until it holds `count` of them: a handful of steps for any
    timetable, and at most ~2 × `count` fires computed in the last one. Empty before a first
    run, or for a trigger this process cannot read."""
    if schedule.last_run_at is None or count < 1:
        return []
    last = utc_to_ms(schedule.last_run_at)
    every = schedule.every // timedelta(milliseconds=1) if schedule.every else 0
    jitter = schedule.jitter // timedelta(milliseconds=1) if schedule.jitter else 0
    try:
        spec = trigger_of(schedule.cron, schedule.tz, every, jitter, schedule.name)
    except SchedulerError:
        return [last]
    cap = 4 * count

    def window(span: int) -> list[int]:
        return fires_between(spec, last - span, last, cap)

    lo, span = 0, 1000
    fires = window(span)
    while len(fires) < count and span < MAX_HISTORY_SPAN_MS:
        lo, span = span, span * 2
        fires = window(span)
    while len(fires) >= cap and span - lo > 1000:  # a burst: the earliest `cap` of a longer run
        mid = (lo + span) // 2
        fewer = window(mid)
        if len(fewer) >= count:
            span, fires = mid, fewer
        else:
            lo = mid
    newest = sorted({*fires, last}, reverse=True)  # (the last run: maybe coalesced or off-table)
    return newest[:count]


TICKS_SHOWN = 8  # the ticks the Schedules page shows per schedule


def last_outcome(schedule: CronInfo, ticks: list[Tick] | None) -> str | None:
    """The state of the job of the schedule's last run (the newest tick, when it is that run);
    None before a first run or when neither Redis nor the audit knows that job."""
    if ticks and schedule.last_run_at is not None and ticks[0].at == schedule.last_run_at:
        return ticks[0].state
    return None


async def tick_history(
    scheduler: Scheduler, schedules: list[CronInfo], per_schedule: int = TICKS_SHOWN
) -> dict[str, list[Tick]]:
    """Each schedule's recent ticks, newest first, with their job's state: one pipelined Redis
    read for every tick id, then one indexed audit read for the ids Redis no longer holds. A
    fire neither knows (missed, coalesced, before the schedule existed, or past retention) is
    left out: the history shows what the data says, never a guess."""
    fires = {c.name: recent_fires(c, per_schedule) for c in schedules}
    ids = [(name, ms, cron_job_id(name, ms)) for name, at in fires.items() for ms in at]
    jobs = await scheduler.store.get_jobs([i for _, _, i in ids]) if ids else []
    states = {i: job.state.value for (_, _, i), job in zip(ids, jobs) if job is not None}
    gone = [i for _, _, i in ids if i not in states]
    audit = audit_of(scheduler)
    if gone and audit is not None:
        try:
            states.update(await audit.statuses(gone))
        except (StorageError, OSError, TimeoutError) as exc:
            log.warning("console: schedule history without the audit (%s)", exc)
    out: dict[str, list[Tick]] = {c.name: [] for c in schedules}
    for name, ms, job_id in ids:
        if job_id in states:
            out[name].append(Tick(ms_to_utc(ms), job_id, states[job_id]))
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
