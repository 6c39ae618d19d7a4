"""Job values: the JobState enum, JobInfo (what get_job returns), JobPage (what
jobs() and dead_letters() return) and ClaimedJob (what a worker runs). Frozen; no I/O."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from listeners.durations import format_duration
from scheduler.core.outbox import (
    STATUS_CANCELLED,
    STATUS_COMPLETED,
    STATUS_FAILED,
    TERMINAL_STATUSES,
    ErrorRecord,
    Outcome,
)
from scheduler.core.progress import Progress
from scheduler.core.retry import DEFAULT_DELAY_MS, DEFAULT_MAX_DELAY_MS

_ID_BYTES = 12  # 96 random bits = exactly 16 base64 characters
_NOT_BASE62 = frozenset("-_")


def new_job_id() -> str:
    """A random job id: 16 base62 characters (about 95 bits, uniform).

    Short because a waiting job stores its id twice (in its hash key and as its
    due-set member), so every character costs memory per job; still
    collision-safe by the birthday bound (the audit trail keeps ids for good,
    so count every id ever generated). A collision would make the second
    schedule a no-op, as with a reused idempotency key. It never starts with
    "-", so it is a safe CLI argument.

    Drawn as 16 base64url characters (each uniform and independent) until none
    is "-" or "_": then each is uniform over the 62 others, and no big-integer
    division is needed.
    """
    while True:
        text = base64.urlsafe_b64encode(os.urandom(_ID_BYTES)).decode()
        if _NOT_BASE62.isdisjoint(text):
            return text


class JobState(str, Enum):
    """Where a job is in its life. Terminal: completed, failed, cancelled."""

    SCHEDULED = "scheduled"
    WAITING_FOR_PARENTS = "waiting_for_parents"  # `after=`: not due until its parents are done
    RUNNING = "running"
    RETRYING = "retrying"
    COMPLETED = STATUS_COMPLETED
    FAILED = STATUS_FAILED
    CANCELLED = STATUS_CANCELLED

    @property
    def terminal(self) -> bool:
        return self.value in TERMINAL_STATUSES


@dataclass(frozen=True)
class JobInfo:
    """A snapshot of one job as stored in Redis."""

    id: str
    topic: str
    state: JobState
    attempts: int
    max_attempts: int
    run_at: datetime
    next_attempt_at: datetime | None
    last_error: Mapping[str, Any] | None
    payload: Any
    metadata: Mapping[str, Any] = field(default_factory=dict)
    tz: str = "UTC"
    backoff_type: str = "exponential"
    backoff_delay_ms: int = DEFAULT_DELAY_MS
    timeout_ms: int = 0
    created_at: datetime | None = None
    finished_at: datetime | None = None
    cron: str | None = None
    # How the job's last attempt ended, when that is not the default: invalid_payload
    # (its topic's schema refused the payload; last_error says why). None otherwise.
    outcome: str | None = None
    backoff_max_delay_ms: int = DEFAULT_MAX_DELAY_MS  # the cap on a retry's delay (retry.Backoff)
    backoff_jitter: str = "none"
    key: str | None = None  # the key its topic's policy, per-key rate limit and FIFO use
    priority: int = 0  # higher is claimed first among due jobs
    deduplicated: int = 0  # later calls a dedupe or the policy folded into this job
    # What its listeners reported (event.progress, event.log): the progress of its latest
    # attempt (None: none reported), and its last log lines of every attempt, oldest first
    # (each a LogLine: a str with .attempt and .at).
    progress: Progress | None = None
    logs: list[str] = field(default_factory=list)
    # What its listeners returned when it completed (JSON): one listener's value, or with several
    # a mapping listener name (module.qualname) -> value of those that returned one. None: none
    # returned anything (or it has not completed).
    result: Any = None
    # A job scheduled with after= (docs/how-to/dependencies.md): its parents' ids, and how many
    # of them it still waits for (0 once released, failed or cancelled); () / 0 otherwise.
    parents: tuple[str, ...] = ()
    waiting_for: int = 0
    # A node of a flow (Scheduler.flow): its root's id (its `parents` are then its children,
    # the jobs it runs after); None otherwise.
    flow: str | None = None


@dataclass(frozen=True)
class ScheduleResult:
    """What a scheduling call did (Scheduler.schedule): `created` False means nothing was
    stored and `job_id` is the job that holds the slot: `reason` "duplicate_id" (the id
    exists), "throttle" (a dedupe key), "debounce" (the waiting job took this call's
    payload and time) or the topic's policy ("short", "singleton", "stately", "exclusive")."""

    job_id: str
    created: bool
    reason: str = ""


@dataclass(frozen=True)
class JobPage:
    """One page of a job listing (Scheduler.jobs) or of dead letters (Scheduler.dead_letters,
    oldest first): pass `cursor` back for the next page; None on the last one."""

    items: list[JobInfo]
    cursor: str | None


@dataclass(frozen=True)
class ClaimedJob:
    """One attempt a worker holds a lease on. `token` proves the lease at settlement."""

    id: str
    attempt: int
    token: str
    topic: str
    payload_json: str
    metadata_json: str
    run_at_ms: int
    due_ms: int
    max_attempts: int
    backoff_type: str
    backoff_delay_ms: int
    backoff_max_delay_ms: int
    backoff_jitter: str
    timeout_ms: int
    trace: str
    cron: str
    # JSON object parent id -> its result JSON (a job scheduled with `after=`); "" for none
    parent_results_json: str = ""
    # A node of a flow (Scheduler.flow): its root's id; the results above are its children's
    flow_root: str = ""


@dataclass(frozen=True)
class NewJob:
    """A validated job ready to be stored (built by the facade, stored by RedisStore)."""

    id: str
    topic: str
    due_ms: int
    run_at_ms: int
    tz: str
    payload_json: str
    metadata_json: str
    max_attempts: int
    backoff_type: str
    backoff_delay_ms: int
    backoff_max_delay_ms: int
    backoff_jitter: str
    timeout_ms: int
    trace: str = ""
    cron: str = ""
    dead_letter: str = ""  # the job's own dead-letter topic ("" for its topic's, if configured)
    # Flow control (scheduler/core/flow.py); enqueue.lua applies the topic's defaults where
    # these leave them open.
    key: str = ""
    priority: str = ""  # "" = the topic's priority_default
    dedupe_key: str = ""
    dedupe_window_ms: str = ""  # "" = until the job finishes
    dedupe_mode: str = "throttle"
    retry_given: bool = True  # False: the topic's default retry policy applies, if it has one
    timeout_given: bool = True
    # Dependencies (docs/how-to/dependencies.md): the parents' ids, deduplicated, and what a
    # parent's failure does to this job; () for none.
    after: tuple[str, ...] = ()
    on_parent_failure: str = "fail"

    def with_trace(self, trace: str) -> NewJob:
        """This job carrying the scheduling call's traceparent. A copy of its fields, as
        dataclasses.replace makes, without replace's second run of __init__ over all of
        them (~5 µs): every traced scheduling call pays this, sampled or not."""
        job = object.__new__(NewJob)
        job.__dict__.update(self.__dict__, trace=trace)
        return job


def _record_json(record: ErrorRecord | None) -> str:
    return "" if record is None else json.dumps(record, separators=(",", ":"))


@dataclass(frozen=True)
class Settlement:
    """The outcome of one attempt, to be written by complete.lua (no error) or fail.lua."""

    job_id: str
    token: str
    outcome: Outcome
    error: ErrorRecord | None = None  # None: the attempt completes the job
    retry_at_ms: int = -1  # fail only: -1 = terminal
    require_expired: bool = False  # fail only: lease recovery
    rejection: ErrorRecord | None = (
        None  # complete only: why the schema refused the payload (invalid_payload)
    )
    # The worker's clock when the listeners started and finished (None: unknown, as for a lost
    # worker): the attempt's finished time and duration even when it is settled late (Redis down).
    started_ms: int | None = None
    ended_ms: int | None = None
    # complete only (succeeded): the listeners' result as JSON (attempt.result_of); "" for none.
    result_json: str = ""

    @property
    def error_json(self) -> str:
        """The error record as stored in last_error and the outbox ("" for none)."""
        return _record_json(self.error)

    @property
    def times(self) -> tuple[int | str, int | str]:
        """(start ms, end ms) as the settling scripts take them ("" for unknown)."""
        return (
            "" if self.started_ms is None else self.started_ms,
            "" if self.ended_ms is None else self.ended_ms,
        )

    @property
    def rejection_json(self) -> str:
        """The refusal as complete.lua stores it in last_error and the outbox ("" for none)."""
        return _record_json(self.rejection)

    @property
    def detail_json(self) -> str:
        """complete.lua's detail argument: the result of a succeeded attempt, the refusal of an
        invalid_payload one ("" for none)."""
        return self.result_json or _record_json(self.rejection)


# A dead letter's error message keeps at most this many characters.
DEAD_LETTER_ERROR_CHARS = 256


def dead_letter_args(s: Settlement) -> tuple[str, str, str]:
    """What fail.lua needs to copy a job failing for good to its dead-letter topic, if it has one:
    the dead letter's new id, the error type and its message cut to DEAD_LETTER_ERROR_CHARS
    (all "" while the job will retry, so a retry carries nothing extra)."""
    if s.retry_at_ms >= 0 or s.error is None:
        return "", "", ""
    return (
        new_job_id(),
        str(s.error.get("type", "")),
        str(s.error.get("message", ""))[:DEAD_LETTER_ERROR_CHARS],
    )


@dataclass(frozen=True)
class CronInfo:
    """A named recurring schedule as stored: a cron expression (`cron`), or an interval
    (`every`, `cron` empty); `declared` when a worker keeps it from an @on_event declaration."""

    name: str
    cron: str
    tz: str
    topic: str
    next_run_at: datetime | None
    paused: bool
    last_run_at: datetime | None
    misfire: str = "coalesce"
    payload: Any = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    max_attempts: int = 5
    every: timedelta | None = None
    jitter: timedelta | None = None
    declared: bool = False

    @property
    def trigger(self) -> str:
        """How it ticks, for people: the cron expression, or "every 15m" (", jitter up to 1m")."""
        if self.every is None:
            return self.cron
        text = f"every {format_duration(self.every // timedelta(milliseconds=1))}"
        if self.jitter:
            text += f", jitter up to {format_duration(self.jitter // timedelta(milliseconds=1))}"
        return text


@dataclass(frozen=True)
class NewCron:
    """A validated schedule ready to be upserted; `job` is the template of every tick's job."""

    name: str
    expr: str  # "" for an interval
    misfire: str
    next_ms: int
    job: NewJob
    trace: str = ""
    every_ms: int = 0  # an interval schedule's, else 0
    jitter_ms: int = 0
    declared: bool = (
        False  # kept by workers from an @on_event declaration (never set by schedule_cron)
    )


@dataclass(frozen=True)
class CronFire:
    """Ticks of one schedule to turn into jobs, guarded by the `next` they were planned from."""

    name: str
    expected_next_ms: int
    new_next_ms: int
    ticks: tuple[tuple[int, str, str], ...]  # (tick ms, job id, traceparent)
