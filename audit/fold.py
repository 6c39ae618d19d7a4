"""Rebuild one job's audit row and attempt rows from all of its outbox events.

Pure: the relay hands in every event it holds for a job and writes what comes
out. Events are applied in stream order (the order of the Lua scripts that
wrote them), so the result depends only on the SET of events: re-delivered
duplicates and batches applied out of order converge on the same rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import cast

from audit.records import AttemptRecord, AuditRecord, Outcome
from audit.streamid import parse_id
import scheduler.outbox as outbox
from scheduler.outbox import OutboxEvent

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FAILED_OUTCOMES: frozenset[str] = frozenset({"failed", "timed_out", "worker_lost"})
_SUCCESS_OUTCOMES: frozenset[str] = frozenset({"succeeded", "no_listener"})
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")
# JSON that jsonb refuses: NUL characters and lone surrogates (as escapes, after ensure_ascii).
_BAD_JSON = re.compile(r"\\u0000|\\ud[89a-f][0-9a-f]{2}", re.IGNORECASE)


@dataclass(frozen=True)
class FoldedJob:
    """The rows of one job."""

    job: AuditRecord
    attempts: tuple[AttemptRecord, ...]


def ms_to_datetime(ms: int) -> datetime:
    """Epoch ms -> aware UTC datetime (exact, no float rounding)."""
    return EPOCH + timedelta(milliseconds=ms)


def clean_text(value: str) -> str:
    """Text Postgres can store: no NUL, no lone surrogate."""
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value


def _clean_json(value: object) -> object:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_clean_json(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(str(k)): _clean_json(v) for k, v in value.items()}
    return value


def parse_json(text: str) -> object:
    """A JSON field of an event; text that is not JSON is kept as a JSON string."""
    try:
        value: object = json.loads(text)
    except ValueError:
        return clean_text(text)
    return value


def dump_json(value: object) -> str:
    """Serialize for a jsonb column, replacing what jsonb cannot hold."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False, default=str)
    if _BAD_JSON.search(text):
        text = json.dumps(_clean_json(value), separators=(",", ":"), allow_nan=False, default=str)
    return text


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _opt(value: str) -> str | None:
    return clean_text(value) if value else None


def _error(text: str) -> dict[str, object] | None:
    if not text:
        return None
    value = parse_json(text)
    if isinstance(value, dict):
        return cast(dict[str, object], value)
    return {"type": None, "message": value if isinstance(value, str) else json.dumps(value)}


def _trace_id(traceparent: str) -> str | None:
    match = _TRACEPARENT.match(traceparent.strip().lower())
    if match:
        return match.group(1)
    return clean_text(traceparent) or None


class _Builder:
    """Mutable state while folding; only frozen records leave this module."""

    def __init__(self, job_id: str, created_at: datetime) -> None:
        self.job = AuditRecord(
            id=job_id, topic="", status="active", attempts=0, max_attempts=None, backoff_type=None,
            backoff_delay_ms=None, last_error=None, run_at=None, tz=None, payload=None, metadata=None,
            trace_id=None, cron_name=None, created_at=created_at, updated_at=created_at,
            completed_at=None, failed_at=None, cancelled_at=None,
        )
        self.rows: dict[int, AttemptRecord] = {}

    def row(self, attempt: int) -> AttemptRecord:
        found = self.rows.get(attempt)
        if found is None:
            found = AttemptRecord(self.job.id, attempt, None, None, None, None, None, None, None, None)
        return found

    def finish(self, e: OutboxEvent, ts: datetime, outcome: Outcome, error: dict[str, object] | None) -> None:
        row = self.row(e.attempt)
        self.rows[e.attempt] = replace(
            row,
            worker=_opt(e.get("worker")) or row.worker,
            finished_at=ts,
            outcome=outcome,
            error_type=_opt(str(error.get("type") or "")) if error else None,
            error_message=_opt(str(error.get("message") or "")) if error else None,
            duration_ms=_int(e.get("duration_ms")),
        )
        self.job = replace(self.job, attempts=max(self.job.attempts, e.attempt))


def _scheduled(b: _Builder, e: OutboxEvent) -> None:
    # A `scheduled` starts the job's life (again, if an id is reused after
    # Redis retention dropped it): everything before it in the stream is history.
    metadata = parse_json(e.get("metadata")) if e.get("metadata") else None
    run_at = _int(e.get("run_at"))
    b.rows.clear()
    b.job = replace(
        b.job, topic=clean_text(e.get("topic")), status="active", attempts=0,
        max_attempts=_int(e.get("max_attempts")), backoff_type=_opt(e.get("backoff_type")),
        backoff_delay_ms=_int(e.get("backoff_delay")), last_error=None,
        run_at=ms_to_datetime(run_at) if run_at is not None else None, tz=_opt(e.get("tz")),
        payload=parse_json(e.get("payload")) if e.get("payload") else None,
        metadata=cast(dict[str, object], metadata) if isinstance(metadata, dict) else None,
        trace_id=_trace_id(e.get("trace")), cron_name=_opt(e.get("cron")),
        completed_at=None, failed_at=None, cancelled_at=None,
    )


def _started(b: _Builder, e: OutboxEvent, ts: datetime) -> None:
    due = _int(e.get("due"))
    b.rows[e.attempt] = AttemptRecord(
        b.job.id, e.attempt, _opt(e.get("worker")), ts, None, None, None, None, None,
        e.ts_ms - due if due is not None else None,
    )
    if not b.job.topic and e.get("topic"):
        b.job = replace(b.job, topic=clean_text(e.get("topic")))


def _attempt_failed(b: _Builder, e: OutboxEvent, ts: datetime) -> None:
    outcome = e.get("outcome") if e.get("outcome") in _FAILED_OUTCOMES else "failed"
    error = _error(e.get("error"))
    b.finish(e, ts, cast(Outcome, outcome), error)
    if error is not None:
        b.job = replace(b.job, last_error=error)


def _attempt_succeeded(b: _Builder, e: OutboxEvent, ts: datetime) -> None:
    outcome = e.get("outcome") if e.get("outcome") in _SUCCESS_OUTCOMES else "succeeded"
    b.finish(e, ts, cast(Outcome, outcome), None)


def _completed(b: _Builder, e: OutboxEvent, ts: datetime) -> None:
    _attempt_succeeded(b, e, ts)
    if b.job.status == "active":  # terminal states never go back; cancelled stays cancelled
        b.job = replace(b.job, status="completed", completed_at=ts)


def _failed(b: _Builder, e: OutboxEvent, ts: datetime) -> None:
    b.job = replace(b.job, attempts=max(b.job.attempts, e.attempt),
                    last_error=_error(e.get("error")) or b.job.last_error)
    if b.job.status == "active":
        b.job = replace(b.job, status="failed", failed_at=ts, completed_at=None)


def _cancelled(b: _Builder, e: OutboxEvent, ts: datetime) -> None:
    # Cancelled wins: the engine refuses to cancel a finished job, so a cancel
    # in the stream always ends the job, whatever follows it.
    if b.job.status != "cancelled":
        b.job = replace(b.job, status="cancelled", cancelled_at=ts, completed_at=None, failed_at=None)


def _released(b: _Builder, e: OutboxEvent, ts: datetime) -> None:
    # The attempt was given back unfinished and starts again under the same
    # number: drop its row so the re-run fills it afresh.
    row = b.rows.get(e.attempt)
    if row is not None and row.outcome is None:
        del b.rows[e.attempt]


def _log_only(b: _Builder, e: OutboxEvent, ts: datetime) -> None:
    """retry_scheduled and schedule.failed change no row; schedule_events keeps them."""


_HANDLERS: dict[str, Callable[[_Builder, OutboxEvent, datetime], None]] = {
    outbox.SCHEDULED: lambda b, e, ts: _scheduled(b, e),
    outbox.ATTEMPT_STARTED: _started,
    outbox.ATTEMPT_FAILED: _attempt_failed,
    outbox.ATTEMPT_SUCCEEDED: _attempt_succeeded,
    outbox.COMPLETED: _completed,
    outbox.FAILED: _failed,
    outbox.CANCELLED: _cancelled,
    outbox.ATTEMPT_RELEASED: _released,
    outbox.RETRY_SCHEDULED: _log_only,
    outbox.SCHEDULE_FAILED: _log_only,
}


def _apply(b: _Builder, e: OutboxEvent) -> None:
    ts = ms_to_datetime(e.ts_ms)
    _HANDLERS.get(e.type, _log_only)(b, e, ts)
    if ts > b.job.updated_at:
        b.job = replace(b.job, updated_at=ts)


def fold_job(job_id: str, created_at: datetime, events: Iterable[OutboxEvent]) -> FoldedJob:
    """The job row and attempt rows that `events` (all known events of the job) imply.

    Args:
        job_id: the job.
        created_at: the job's partition key (from schedule_job_index).
        events: every event of the job, in any order, duplicates allowed.
    """
    unique = {e.stream_id: e for e in events}
    builder = _Builder(job_id, created_at)
    for stream_id in sorted(unique, key=parse_id):
        _apply(builder, unique[stream_id])
    return FoldedJob(builder.job, tuple(builder.rows[a] for a in sorted(builder.rows)))
