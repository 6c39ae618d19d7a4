"""The API's answers, as its OpenAPI document states them: one model per kind of answer, each
built from the engine's own record (`of`), and the error body every refusal carries."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, PlainSerializer

from audit.records import AuditRecord
from console import data
from console.timeline import Attempt, LogEntry, Span
from scheduler.core.job import CronInfo, JobInfo
from scheduler.core.outbox import error_doc
from scheduler.core.progress import Progress
from scheduler.core.timeutil import rfc3339
from scheduler.worker.advertise import WorkerInfo

# Every instant an answer carries, as the CLI prints it: RFC 3339 UTC with milliseconds
# (timeutil.rfc3339).
Stamp = Annotated[datetime, PlainSerializer(rfc3339, return_type=str)]


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorOut(BaseModel):
    error: ErrorDetail


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "bad input, naming the field"},
    401: {"model": ErrorOut, "description": "no valid token"},
    403: {"model": ErrorOut, "description": "a viewer tried to act, or a cross-site request"},
    404: {"model": ErrorOut, "description": "no such job, schedule, topic, dead letter or worker"},
    409: {
        "model": ErrorOut,
        "description": "the job's state does not allow the action (the message names it)",
    },
    413: {"model": ErrorOut, "description": "a body longer than [console] max_body_bytes"},
    415: {"model": ErrorOut, "description": "an action without a JSON body"},
    421: {
        "model": ErrorOut,
        "description": "a Host that is not this console's ([console] allowed_hosts)",
    },
    422: {"model": ErrorOut, "description": "the request does not match this document"},
    503: {"model": ErrorOut, "description": "Redis or PostgreSQL unavailable"},
}


class ScheduledOut(BaseModel):
    job_id: str
    created: bool
    reason: str


class ProgressOut(BaseModel):
    percent: float = Field(description="0 to 100")
    message: str | None

    @classmethod
    def of(cls, p: Progress | None) -> ProgressOut | None:
        return None if p is None else cls(percent=p.percent, message=p.message)


class JobOut(BaseModel):
    id: str
    topic: str
    state: str
    attempts: int
    max_attempts: int
    run_at: Stamp
    tz: str
    next_attempt_at: Stamp | None
    created_at: Stamp | None
    finished_at: Stamp | None
    key: str | None
    priority: int
    cron: str | None
    payload: Any
    metadata: dict[str, Any]
    last_error: dict[str, Any] | None = Field(
        description="type, message, listener, traceback (a list of lines)"
    )
    progress: ProgressOut | None = Field(
        None, description="what its latest attempt's listeners reported (null: nothing)"
    )
    result: Any = Field(
        None,
        description="what its listeners returned when it completed (JSON): the value of the "
        "topic's one listener, or an object listener name -> value with several; null: nothing "
        "(a job past Redis's retention: its attempts' result holds the audit's copy)",
    )
    parents: list[str] = Field(
        default_factory=list,
        description="the ids of the jobs it was scheduled after (after=; docs/how-to/"
        "dependencies.md); empty: none",
    )
    waiting_for: int = Field(
        0, description="how many of its parents it still waits for (state waiting_for_parents)"
    )
    flow: str | None = Field(
        None,
        description="a node of a flow: its root's id (GET /api/v1/flows/{root_id}); its "
        "`parents` are then its children, the jobs it runs after; null: no flow",
    )
    in_redis: bool = Field(
        True,
        description="false: a job past Redis's retention, as the audit trail remembers it "
        "(an id prefix search finds those too).",
    )

    @classmethod
    def of(cls, j: JobInfo) -> JobOut:
        return cls(
            id=j.id,
            topic=j.topic,
            state=j.state.value,
            attempts=j.attempts,
            max_attempts=j.max_attempts,
            run_at=j.run_at,
            tz=j.tz,
            next_attempt_at=j.next_attempt_at,
            created_at=j.created_at,
            finished_at=j.finished_at,
            key=j.key,
            priority=j.priority,
            cron=j.cron,
            payload=j.payload,
            metadata=dict(j.metadata or {}),
            last_error=error_doc(j.last_error) if j.last_error else None,
            progress=ProgressOut.of(j.progress),
            result=j.result,
            parents=list(j.parents),
            waiting_for=j.waiting_for,
            flow=j.flow,
        )

    @classmethod
    def of_record(cls, r: AuditRecord) -> JobOut:
        """A job Redis no longer holds, from its audit row."""
        return cls(
            id=r.id,
            topic=r.topic,
            state=str(r.status),
            attempts=r.attempts,
            max_attempts=r.max_attempts or 0,
            run_at=r.run_at or r.created_at,
            tz=r.tz or "UTC",
            next_attempt_at=None,
            created_at=r.created_at,
            finished_at=r.completed_at or r.failed_at or r.cancelled_at,
            key=None,
            priority=0,
            cron=r.cron_name,
            payload=r.payload,
            metadata=dict(r.metadata or {}),
            last_error=error_doc(r.last_error) if r.last_error else None,
            parents=list(r.parents),
            in_redis=False,
        )


class LogLineOut(BaseModel):
    attempt: int
    at: Stamp | None = Field(
        description="when it was written (null: the audit's copy, which keeps no time)"
    )
    line: str

    @classmethod
    def of(cls, e: LogEntry) -> LogLineOut:
        return cls(attempt=e.attempt, at=e.at, line=e.line)


class AttemptOut(BaseModel):
    attempt: int
    worker: str | None
    started_at: Stamp | None
    finished_at: Stamp | None
    outcome: str | None
    error_type: str | None
    error_message: str | None
    duration_ms: int | None
    lateness_ms: int | None
    due_at: Stamp | None = Field(None, description="when it was due: started_at less lateness_ms")
    progress: ProgressOut | None = Field(
        None,
        description="what its listeners reported last (the running attempt's live one, from "
        "Redis; a settled one's from the audit)",
    )
    logs: list[LogLineOut] = Field(default_factory=list, description="its log lines, oldest first")
    result: Any = Field(
        None, description="what its listeners returned (a successful attempt's; null: nothing)"
    )

    @classmethod
    def of(cls, a: Attempt) -> AttemptOut:
        r = a.record
        return cls(
            attempt=r.attempt,
            worker=r.worker,
            started_at=a.started_at,
            finished_at=r.finished_at,
            outcome=r.outcome,
            error_type=r.error_type,
            error_message=r.error_message,
            duration_ms=r.duration_ms,
            lateness_ms=r.lateness_ms,
            due_at=a.due_at,
            progress=ProgressOut.of(a.progress),
            logs=[LogLineOut.of(e) for e in a.logs],
            result=r.result,
        )


class SpanOut(BaseModel):
    kind: Literal["scheduled", "attempt", "retry_wait", "terminal"] = Field(
        description="scheduled: from its scheduling to its first due time; attempt: one "
        "attempt's run; retry_wait: from an attempt's end to the next one's due time; terminal: "
        "the instant it completed, failed for good or was cancelled"
    )
    status: str = Field(
        description="scheduled, or waiting_for_parents (a job waiting for the jobs it runs "
        "after: no due time yet); an attempt's outcome (or running); waited or waiting; the end "
        "state"
    )
    attempt: int | None = Field(description="the attempt (a retry wait: the one it waits for)")
    start_at: Stamp
    end_at: Stamp | None = Field(description="null: still open (an attempt running now)")
    planned: bool = Field(description="true: end_at is a due time still ahead")
    duration_ms: int = Field(description="end_at - start_at (an open span: until now)")

    @classmethod
    def of(cls, s: Span, now: datetime) -> SpanOut:
        return cls(
            kind=s.kind,
            status=s.status,
            attempt=s.attempt,
            start_at=s.start,
            end_at=s.end,
            planned=s.planned,
            duration_ms=s.duration_ms(now),
        )


class JobDetailOut(BaseModel):
    id: str
    state: str
    job: JobOut | None = Field(description="as Redis holds it; null once past retention")
    audit_status: str | None
    trace_id: str | None
    attempts: list[AttemptOut] = Field(
        description="the audit's attempts with what their listeners reported (the attempt "
        "running now: its live progress and log lines)"
    )
    timeline: list[SpanOut] = Field(
        default_factory=list,
        description="the job's page's attempt timeline, in order: scheduled, each attempt and "
        "the retry wait before it, the end",
    )


class JobPageOut(BaseModel):
    items: list[JobOut]
    cursor: str | None


class ActionOut(BaseModel):
    outcome: Literal["done", "not_found", "refused"]
    message: str
    job_id: str | None = None


class TickOut(BaseModel):
    at: Stamp = Field(description="the fire's instant")
    job_id: str = Field(description="the job it made (GET /api/v1/jobs/{job_id})")
    state: str = Field(description="that job's state now (from Redis, else the audit trail)")


class CronOut(BaseModel):
    name: str
    topic: str
    trigger: str
    tz: str
    paused: bool
    declared: bool
    next_run_at: Stamp | None
    last_run_at: Stamp | None
    last_outcome: str | None = Field(
        None,
        description="the state of the last run's job (null: not run yet, or a run whose job "
        "neither Redis nor the audit knows)",
    )
    recent_ticks: list[TickOut] = Field(
        default_factory=list,
        description="its latest fires with their job's state, newest first, as the Schedules "
        "page shows them (a fire with no job known, missed or past retention, is left out)",
    )

    @classmethod
    def of(cls, c: CronInfo, ticks: list[data.Tick] | None = None) -> CronOut:
        ticks = ticks or []
        return cls(
            name=c.name,
            topic=c.topic,
            trigger=c.trigger,
            tz=c.tz,
            paused=c.paused,
            declared=c.declared,
            next_run_at=c.next_run_at,
            last_run_at=c.last_run_at,
            last_outcome=data.last_outcome(c, ticks),
            recent_ticks=[TickOut(at=t.at, job_id=t.job_id, state=t.state) for t in ticks],
        )


class TopicOut(BaseModel):
    name: str
    counts: dict[str, int]
    configured: bool
    options: dict[str, Any] | None
    parked: int = Field(
        0, description="due jobs its limits (or its key policy) hold back: the engine parked them"
    )
    parked_next_at: Stamp | None = Field(
        None, description="when the engine looks at its parked jobs again (null: not planned)"
    )
    blocked_keys: list[str] = Field(
        default_factory=list, description="the keys a key_strict_fifo topic has blocked, sorted"
    )


class WorkerOut(BaseModel):
    id: str
    host: str
    pid: int
    topics: list[str]
    all_topics: bool
    concurrency: int
    running: int
    last_heartbeat: Stamp
    state: Literal["running", "draining"] = Field(
        description="draining: it claims no more and exits once its running attempts finished"
    )
    drain_requested_at: Stamp | None = Field(
        description="when an operator asked it to drain (null: nobody)"
    )
    version: str = Field(
        "", description="the horae version the worker runs (empty: a worker too old to say)"
    )

    @classmethod
    def of(cls, w: WorkerInfo) -> WorkerOut:
        return cls(
            id=w.id,
            host=w.host,
            pid=w.pid,
            topics=list(w.topics),
            all_topics=w.all_topics,
            concurrency=w.concurrency,
            running=w.running,
            last_heartbeat=w.last_heartbeat,
            state="draining" if w.draining else "running",
            drain_requested_at=w.drain_requested_at,
            version=w.version,
        )


class CronPageOut(BaseModel):
    items: list[CronOut]
    cursor: str | None = Field(None, description="always null: one page holds every schedule")


class WorkerPageOut(BaseModel):
    items: list[WorkerOut]
    cursor: str | None = Field(None, description="always null: one page holds every live worker")


class TopicPageOut(BaseModel):
    items: list[TopicOut]
    cursor: str | None = Field(None, description="always null: one page holds every topic")


class StatsOut(BaseModel):
    totals: dict[str, int]
    topics: dict[str, dict[str, int]]


class DeadLetterTopicOut(BaseModel):
    topic: str = Field(description="a dead-letter topic (a topic's `dead_letter`)")
    count: int = Field(description="the dead letters it holds now")


class DeadLetterTopicPageOut(BaseModel):
    items: list[DeadLetterTopicOut]
    cursor: str | None = Field(
        None, description="always null: one page holds every dead-letter topic"
    )
