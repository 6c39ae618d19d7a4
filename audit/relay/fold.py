"""Rebuild one job's audit row and attempt rows from all of its outbox events.

Pure: the relay hands in every event it holds for a job and writes what comes
out. Events are applied in stream order (the order of the Lua scripts that
wrote them), so the result depends only on the SET of events: re-delivered
duplicates and batches applied out of order converge on the same rows.
A JobFold can also be resumed with later events, which is what the relay does
between batches while nothing else touched the job (audit/relay/foldcache.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from typing import Any, cast

import scheduler.core.outbox as outbox
from audit.jsontext import JsonText, clean_text, json_text, parse_json
from audit.records import AttemptRecord, AuditRecord
from audit.relay.streamid import StreamId, parse_id
from scheduler.core.outbox import OutboxEvent, Outcome
from scheduler.core.timeutil import ms_to_utc
from scheduler.core.traceparent import parse_traceparent

# Keys of a fold's row dicts that are written but are not part of the records.
_BOOKKEEPING: frozenset[str] = frozenset({"applied_ms", "applied_seq", "job_created_at"})
# Events that end an attempt (or the job with it): their time is the attempt's end (finished_at).
_ENDS: frozenset[str] = frozenset(
    {outbox.ATTEMPT_FAILED, outbox.ATTEMPT_SUCCEEDED, outbox.COMPLETED, outbox.FAILED}
)
# The job columns an attempt, a settlement or a cancellation changes (audit/queries.sql:
# settle_jobs). The others (payload, run_at, ...) change only when a job is scheduled,
# debounced, rescheduled or retried: a row whose others are stored as they stand is settled
# with these alone.
SETTLED_COLUMNS: tuple[str, ...] = (
    "status",
    "attempts",
    "last_error",
    "updated_at",
    "completed_at",
    "failed_at",
    "cancelled_at",
    "applied_ms",
    "applied_seq",
    "deduplicated",
)


@dataclass(frozen=True)
class FoldedJob:
    """The rows of one job."""

    job: AuditRecord
    attempts: tuple[AttemptRecord, ...]


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _opt(value: str) -> str | None:
    return clean_text(value) if value else None


def _error(text: str) -> tuple[JsonText | dict[str, object], dict[str, object]] | None:
    """An error record as stored (its own text when it is an object) and as read."""
    if not text:
        return None
    raw = json_text(text)
    value = raw.value()
    if isinstance(value, dict):
        return raw, cast(dict[str, object], value)
    made: dict[str, object] = {
        "type": None,
        "message": value if isinstance(value, str) else json.dumps(value),
    }
    return made, made


def _value(stored: object) -> object:
    """A row's value as the records hold it (JsonText parsed, exactly)."""
    return stored.value() if isinstance(stored, JsonText) else stored


def _attempt_values(row: dict[str, Any]) -> dict[str, Any]:
    """An attempt row as AttemptRecord takes it (its result's JsonText parsed)."""
    values = {k: v for k, v in row.items() if k not in _BOOKKEEPING}
    values["result"] = _value(values["result"])
    return values


def _trace_id(traceparent: str) -> str | None:
    """The trace id of a valid traceparent; anything else is kept as the text it is."""
    parsed = parse_traceparent(traceparent.strip().lower())
    if parsed is not None:
        return parsed.trace_id_hex
    return clean_text(traceparent) or None


class JobFold:
    """One job's rows while folding, mutable so each event costs a few dict writes.

    Apply events in stream order (apply() refuses one that is not after `last`);
    the relay keeps a JobFold between batches and resumes it when nothing else
    touched the job meanwhile (see audit.relay), else it folds from scratch.
    """

    __slots__ = ("job", "rows", "dropped", "base", "stored", "written")

    def __init__(self, job_id: str, created_at: datetime) -> None:
        # The job's row as written (schedule_audit's columns), with applied_ms/applied_seq:
        # the stream id of the latest event folded in (migration 0002; not in AuditRecord).
        self.job: dict[str, Any] = {
            "id": job_id,
            "topic": "",
            "status": outbox.ACTIVE,
            "attempts": 0,
            "max_attempts": None,
            "backoff_type": None,
            "backoff_delay_ms": None,
            "last_error": None,
            "run_at": None,
            "tz": None,
            "payload": None,
            "metadata": None,
            "trace_id": None,
            "cron_name": None,
            "created_at": created_at,
            "updated_at": created_at,
            "completed_at": None,
            "failed_at": None,
            "cancelled_at": None,
            "applied_ms": None,
            "applied_seq": None,
            "deduplicated": 0,
            "parents": None,  # (migration 0012) the ids a job scheduled with after= waited for
        }
        self.rows: dict[int, dict[str, Any]] = {}
        # An attempt row was removed since the relay last wrote this fold: the stored
        # rows may hold one the fold no longer has (the relay deletes it, then clears this).
        self.dropped = False
        # The attempt numbers whose rows the database holds as of this fold's last write
        # (None: not known, e.g. a fold rebuilt from stored events): the writer COPYs the
        # others, which cannot conflict, and upserts these.
        self.stored: set[int] | None = None
        # Attempts of the job's runs ended by `retried`: the engine numbers each run's
        # attempts from 1, the rows go on from here (unique per job id and number).
        self.base = 0
        # The job row's columns outside SETTLED_COLUMNS as the database holds them since this
        # fold's last write (None: not known): while they stand, the row is settled, not
        # upserted whole.
        self.written: tuple[Any, ...] | None = None

    def apply(self, e: OutboxEvent, stream_id: StreamId | None = None) -> None:
        """Apply one event that comes after every event applied so far."""
        sid = stream_id if stream_id is not None else parse_id(e.stream_id)
        last = self.last
        if last is not None and sid <= last:
            raise ValueError(f"event {e.stream_id} is not after {last} (fold from scratch instead)")
        ts = ms_to_utc(e.ts_ms)
        if self.base and e.type != outbox.RETRIED:
            e = e._replace(attempt=e.attempt + self.base)
        _HANDLERS.get(e.type, _log_only)(self, e, finished_at(e, ts) if e.type in _ENDS else ts)
        if ts > self.job["updated_at"]:
            self.job["updated_at"] = ts
        self.job["applied_ms"], self.job["applied_seq"] = sid

    def unsettled(self) -> tuple[Any, ...]:
        """The job row's values outside SETTLED_COLUMNS (compared with `written`)."""
        return _unsettled(self.job)

    @property
    def last(self) -> StreamId | None:
        """The stream id of the latest applied event (the row's applied_ms/applied_seq)."""
        ms = self.job["applied_ms"]
        return None if ms is None else (ms, self.job["applied_seq"])

    def result(self) -> FoldedJob:
        """The frozen rows as they stand."""
        job: dict[str, Any] = {k: _value(v) for k, v in self.job.items() if k not in _BOOKKEEPING}
        return FoldedJob(
            AuditRecord(**job),
            tuple(AttemptRecord(**_attempt_values(self.rows[a])) for a in sorted(self.rows)),
        )

    def row(self, attempt: int) -> dict[str, Any]:
        found = self.rows.get(attempt)
        if found is None:
            found = self.rows[
                attempt
            ] = {  # schedule_attempts' columns (job_created_at: not in AttemptRecord)
                "job_id": self.job["id"],
                "attempt": attempt,
                "worker": None,
                "started_at": None,
                "finished_at": None,
                "outcome": None,
                "error_type": None,
                "error_message": None,
                "duration_ms": None,
                "lateness_ms": None,
                "job_created_at": self.job["created_at"],
                "progress_percent": None,
                "progress_message": None,
                "logs": None,
                "result": None,
            }
        return found

    def finish(
        self, e: OutboxEvent, ts: datetime, outcome: Outcome, error: dict[str, object] | None
    ) -> None:
        row = self.row(e.attempt)
        row["worker"] = _opt(e.get("worker")) or row["worker"]
        row["finished_at"] = ts
        row["outcome"] = outcome
        row["error_type"] = _opt(str(error.get("type") or "")) if error else None
        row["error_message"] = _opt(str(error.get("message") or "")) if error else None
        row["duration_ms"] = _int(e.get("duration_ms"))
        # what its listeners returned (a successful attempt's settlement only; as written)
        row["result"] = json_text(e.get("result")) if e.get("result") else None
        _report(row, e)
        self.job["attempts"] = max(self.job["attempts"], e.attempt)


# schedule_audit's columns: the keys of a fold's job dict; an attempt row's keys, schedule_attempts'
# columns (two of them named otherwise there: copyrows.py). Read off a fold, not listed again.
_SAMPLE = JobFold("", datetime(1970, 1, 1))
JOB_COLUMNS: tuple[str, ...] = tuple(_SAMPLE.job)
ATTEMPT_KEYS: tuple[str, ...] = tuple(_SAMPLE.row(1))
# (many keys: itemgetter gives a tuple)
_unsettled: Callable[[dict[str, Any]], tuple[Any, ...]] = itemgetter(
    *(k for k in JOB_COLUMNS if k not in SETTLED_COLUMNS and k not in ("id", "created_at"))
)


def _report(row: dict[str, Any], e: OutboxEvent) -> None:
    """What the attempt's listeners reported, from its settlement event (fields progress and
    logs, written only when there was something: scheduler/core/outbox.py); anything malformed
    is left out rather than failing the batch."""
    progress = parse_json(e.get("progress")) if e.get("progress") else None
    percent = progress.get("percent") if isinstance(progress, dict) else None
    message = progress.get("message") if isinstance(progress, dict) else None
    valid = (
        isinstance(percent, (int, float)) and not isinstance(percent, bool) and 0 <= percent <= 100
    )
    row["progress_percent"] = float(percent) if valid else None  # type: ignore[arg-type]
    row["progress_message"] = clean_text(message) if valid and isinstance(message, str) else None
    logs = parse_json(e.get("logs")) if e.get("logs") else None
    row["logs"] = (
        [clean_text(str(line)) for line in logs] if isinstance(logs, list) and logs else None
    )


def _scheduled(fold: JobFold, e: OutboxEvent, ts: datetime) -> None:
    # A `scheduled` starts the job's life (again, if an id is reused after
    # Redis retention dropped it): everything before it in the stream is history.
    metadata = json_text(e.get("metadata")) if e.get("metadata") else None
    run_at = _int(e.get("run_at"))
    if fold.rows:
        fold.rows.clear()
        fold.dropped = True
    fold.base = 0
    fold.job.update(
        topic=clean_text(e.get("topic")),
        status=outbox.ACTIVE,
        attempts=0,
        max_attempts=_int(e.get("max_attempts")),
        backoff_type=_opt(e.get("backoff_type")),
        backoff_delay_ms=_int(e.get("backoff_delay")),
        last_error=None,
        run_at=ms_to_utc(run_at) if run_at is not None else None,
        tz=_opt(e.get("tz")),
        payload=json_text(e.get("payload")) if e.get("payload") else None,
        metadata=metadata if metadata is not None and metadata.is_object() else None,
        trace_id=_trace_id(e.get("trace")),
        cron_name=_opt(e.get("cron")),
        parents=_parents(e.get("parents")),
        completed_at=None,
        failed_at=None,
        cancelled_at=None,
    )


def _parents(raw: str) -> list[str] | None:
    """The parents of a `scheduled` event (a JSON list of ids; absent: none); anything
    malformed is left out rather than failing the batch."""
    value = parse_json(raw) if raw else None
    if not isinstance(value, list) or not value:
        return None
    return [clean_text(str(p)) for p in value]


def finished_at(e: OutboxEvent, ts: datetime) -> datetime:
    """When a settled attempt ended: its `finished` field (the worker's measured end; the
    settlement, `ts`, may come later, after a Redis outage), else ts (events written before it)."""
    raw = e.get("finished")
    finished = _int(raw) if raw else None
    if finished is None or finished == e.ts_ms or not 0 <= finished < e.ts_ms:
        return ts  # (settled as it ended: the common case costs no second datetime)
    return ms_to_utc(finished)


def _started(fold: JobFold, e: OutboxEvent, ts: datetime) -> None:
    due = _int(e.get("due"))
    fold.rows.pop(e.attempt, None)
    row = fold.row(e.attempt)
    row["worker"] = _opt(e.get("worker"))
    row["started_at"] = ts
    row["lateness_ms"] = e.ts_ms - due if due is not None else None
    if not fold.job["topic"] and e.get("topic"):
        fold.job["topic"] = clean_text(e.get("topic"))


def _attempt_failed(fold: JobFold, e: OutboxEvent, ts: datetime) -> None:
    outcome = (
        e.get("outcome")
        if e.get("outcome") in outbox.FAILED_OUTCOMES
        else outbox.ATTEMPT_FAILED_OUTCOME
    )
    error = _error(e.get("error"))
    fold.finish(e, ts, cast(Outcome, outcome), error[1] if error else None)
    if error is not None:
        fold.job["last_error"] = error[0]


def _attempt_succeeded(fold: JobFold, e: OutboxEvent, ts: datetime) -> None:
    outcome = e.get("outcome") if e.get("outcome") in outbox.SUCCESS_OUTCOMES else outbox.SUCCEEDED
    error = _error(e.get("error"))  # invalid_payload: the schema's refusal
    fold.finish(e, ts, cast(Outcome, outcome), error[1] if error else None)
    if error is not None:
        fold.job["last_error"] = error[0]


def _completed(fold: JobFold, e: OutboxEvent, ts: datetime) -> None:
    _attempt_succeeded(fold, e, ts)
    if (
        fold.job["status"] == outbox.ACTIVE
    ):  # terminal states never go back; cancelled stays cancelled
        fold.job.update(status=outbox.STATUS_COMPLETED, completed_at=ts)


def _failed(fold: JobFold, e: OutboxEvent, ts: datetime) -> None:
    fold.job["attempts"] = max(fold.job["attempts"], e.attempt)
    error = _error(e.get("error"))
    fold.job["last_error"] = error[0] if error else fold.job["last_error"]
    if fold.job["status"] == outbox.ACTIVE:
        fold.job.update(status=outbox.STATUS_FAILED, failed_at=ts, completed_at=None)


def _cancelled(fold: JobFold, e: OutboxEvent, ts: datetime) -> None:
    # Cancelled wins: the engine refuses to cancel a finished job, so a cancel
    # in the stream always ends the job, whatever follows it (until a `retried`).
    if fold.job["status"] != outbox.STATUS_CANCELLED:
        fold.job.update(
            status=outbox.STATUS_CANCELLED, cancelled_at=ts, completed_at=None, failed_at=None
        )


def _retried(fold: JobFold, e: OutboxEvent, ts: datetime) -> None:
    # The one way back from a terminal state (an operator's retry; the engine only
    # retries a failed or cancelled job with no attempt in flight, so nothing of the
    # run that ended follows it in the stream). Its `a` is that run's attempt count.
    fold.base += max(e.attempt, 0)
    fold.job["attempts"] = max(fold.job["attempts"], fold.base)
    fold.job.update(status=outbox.ACTIVE, completed_at=None, failed_at=None, cancelled_at=None)


def _rescheduled(fold: JobFold, e: OutboxEvent, ts: datetime) -> None:
    run_at = _int(e.get("run_at"))
    if run_at is not None:
        fold.job["run_at"] = ms_to_utc(run_at)
    fold.job["tz"] = _opt(e.get("tz")) or fold.job["tz"]


def _deduplicated(fold: JobFold, e: OutboxEvent, ts: datetime) -> None:
    # A later call a dedupe key or the topic's policy kept out (schedule_events keeps which).
    fold.job["deduplicated"] += 1


def _debounced(fold: JobFold, e: OutboxEvent, ts: datetime) -> None:
    # A later call (dedupe mode debounce) gave the waiting job its payload and time.
    fold.job["deduplicated"] += 1
    run_at = _int(e.get("run_at"))
    if run_at is not None:
        fold.job["run_at"] = ms_to_utc(run_at)
    if e.get("payload"):
        fold.job["payload"] = json_text(e.get("payload"))


def _deleted(fold: JobFold, e: OutboxEvent, ts: datetime) -> None:
    # A job deleted before it finished never runs again: the row ends cancelled (the
    # statuses stay four); a finished one keeps its status. schedule_events keeps the
    # `deleted` event and its actor; a later `scheduled` of the same id starts a new life.
    if fold.job["status"] == outbox.ACTIVE:
        fold.job.update(status=outbox.STATUS_CANCELLED, cancelled_at=ts)


def _released(fold: JobFold, e: OutboxEvent, ts: datetime) -> None:
    # The attempt was given back unfinished and starts again under the same
    # number: drop its row so the re-run fills it afresh.
    row = fold.rows.get(e.attempt)
    if row is not None and row["outcome"] is None:
        del fold.rows[e.attempt]
        fold.dropped = True


def _log_only(fold: JobFold, e: OutboxEvent, ts: datetime) -> None:
    """retry_scheduled and schedule.failed change no row; schedule_events keeps them."""


_HANDLERS: dict[str, Callable[[JobFold, OutboxEvent, datetime], None]] = {
    outbox.SCHEDULED: _scheduled,
    outbox.ATTEMPT_STARTED: _started,
    outbox.ATTEMPT_FAILED: _attempt_failed,
    outbox.ATTEMPT_SUCCEEDED: _attempt_succeeded,
    outbox.COMPLETED: _completed,
    outbox.FAILED: _failed,
    outbox.CANCELLED: _cancelled,
    outbox.ATTEMPT_RELEASED: _released,
    outbox.RETRY_SCHEDULED: _log_only,
    outbox.SCHEDULE_FAILED: _log_only,
    outbox.RETRIED: _retried,
    outbox.RESCHEDULED: _rescheduled,
    outbox.DELETED: _deleted,
    outbox.DEBOUNCED: _debounced,
    outbox.DEDUPLICATED: _deduplicated,
}


def fold_new(job_id: str, created_at: datetime, events: Iterable[OutboxEvent]) -> JobFold:
    """A JobFold of `events` (any order, duplicates allowed), ready to resume."""
    unique = {parse_id(e.stream_id): e for e in events}
    fold = JobFold(job_id, created_at)
    for sid in sorted(unique):
        fold.apply(unique[sid], sid)
    return fold
