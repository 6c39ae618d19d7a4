"""The audit outbox: the format of the events every Lua script appends to the
`{ns}:outbox` stream, in the same script as the state change it describes.

`audit/` reads this stream through a consumer group and must rely only on
what is written here. Each stream entry is a flat map of string fields:

common to every event
    e       event type (one of EVENT_TYPES)
    id      job id
    ts      Redis-clock epoch ms at which the change happened
    a       attempt number the event concerns (0 before any attempt)

per event type (all values are strings; ms are integers, json is JSON text: payload and
metadata exactly as the caller's value was serialized, never decoded and encoded again by
a script, so numbers of any size and precision reach the audit as written)
    scheduled          topic, run_at ms, due ms, tz, payload json, metadata json,
                       max_attempts, backoff_type, backoff_delay ms, timeout_ms,
                       trace (W3C traceparent or ""), cron (schedule name or ""),
                       parents json (a list of job ids: scheduled with after=; absent
                       otherwise; the job waits in state waiting_for_parents)
    attempt_started    worker, due ms (when this attempt was due), topic
    attempt_failed     worker, outcome (failed|timed_out|worker_lost),
                       error json {type, message, traceback}, duration_ms, finished ms
    retry_scheduled    next_at ms (when attempt a+1 is due: the attempt's finished + backoff,
                       possibly before ts when the settlement was written late)
    completed          worker, outcome (succeeded|no_listener|invalid_payload), duration_ms,
                       finished ms, error json (invalid_payload only: why the topic's schema
                       refused the payload; the job completes without running listeners or
                       retrying), result json (succeeded only, when its listeners returned
                       something: one listener's value, or an object listener name -> value;
                       absent otherwise)
    failed             error json (the last error), finished ms; terminal. A job that
                       waited for parents (after=) and failed because one of them did:
                       outcome parent_failed, parent (that parent's id), a = 0, no attempt
    schedule.failed    no fields of its own: the job failed for good and the worker
                       delivers SCHEDULE_FAILED_TOPIC in-process (the audit logs it)
    cancelled          running ("1" when an attempt was in flight; its outcome follows
                       as attempt_succeeded/attempt_failed and does not change the status),
                       actor (who asked; absent when written without one), parent (a
                       job waiting for parents, cancelled by its on_parent_failure "cancel":
                       the parent that did not complete)
    attempt_succeeded  worker, outcome, duration_ms, error and result as for completed; only for
                       an attempt that finished after its job was cancelled
    attempt_released   worker; a graceful stop gave attempt a back unfinished: it does
                       not count, and attempt a will start again

    finished and duration_ms are the attempt's own, as its worker measured them (its clock,
    calibrated to Redis, read when the listeners started and finished; lua/_lib.lua
    attempt_times): ts is when the settlement reached Redis, later when Redis was down
    meanwhile. finished is within [the attempt's start, ts]; a lost worker's is ts. The audit
    takes finished as the attempt's finished_at and the job's completed_at/failed_at.

    completed, attempt_succeeded and attempt_failed also carry what the settling
    attempt's listeners reported (event.progress, event.log), only when they did:
    progress json {percent, message (absent: none)}, logs json [its lines, oldest first]

job operations (Scheduler.retry/delete/reschedule; `actor` names who asked)
    retried            from (failed|cancelled), due ms (now), actor; a is the number of
                       attempts of the run that ended: the job's attempt counter starts
                       again at 0, so attempt n after it is attempt a+n of the job's
                       whole life (how the audit numbers it). The one way back from a
                       terminal state.
    rescheduled        run_at ms, due ms (run_at, or now when it was past), tz, actor
    deleted            from (the state it was deleted in), actor; the id is free again;
                       replayed_as (Scheduler.replay of a dead letter only: the new job's id,
                       whose `scheduled` metadata has replayed_from). A dead letter is created
                       by fail.lua with its own `scheduled` (metadata source_job_id, ...);
                       retention drops one as `deleted` with actor "retention"

flow control (enqueue.lua), on the job that holds the slot; a is 0
    deduplicated       reason (why a later call was kept out: its dedupe key or the topic's
                       policy), dropped (the refused job's id)
    debounced          run_at ms, due ms, payload json (the later call's, now the job's),
                       dropped (the later call's job id)

Order: for one job the stream order is the order of its changes (one script
at a time), but a relay may apply batches out of order after a crash, so
consumers converge using (attempt, ts) and the rule "terminal states never
go back, except through `retried`; cancelled wins over a later completion".
"""

from __future__ import annotations

import re
import traceback as _traceback
from collections.abc import Mapping
from typing import Any, Final, Literal, NamedTuple, TypedDict

SCHEDULED: Final = "scheduled"
ATTEMPT_STARTED: Final = "attempt_started"
ATTEMPT_FAILED: Final = "attempt_failed"
ATTEMPT_SUCCEEDED: Final = "attempt_succeeded"
ATTEMPT_RELEASED: Final = "attempt_released"
RETRY_SCHEDULED: Final = "retry_scheduled"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
SCHEDULE_FAILED: Final = "schedule.failed"
CANCELLED: Final = "cancelled"
RETRIED: Final = "retried"
RESCHEDULED: Final = "rescheduled"
DELETED: Final = "deleted"
# Flow control (enqueue.lua), recorded on the job that holds the slot: a later call a
# dedupe key or the topic's policy kept out (fields reason, dropped: the refused id),
# and a debounce that gave the waiting job a later call's payload and time.
DEDUPLICATED: Final = "deduplicated"
DEBOUNCED: Final = "debounced"

EVENT_TYPES: Final = frozenset(
    {
        SCHEDULED,
        ATTEMPT_STARTED,
        ATTEMPT_FAILED,
        ATTEMPT_SUCCEEDED,
        ATTEMPT_RELEASED,
        RETRY_SCHEDULED,
        COMPLETED,
        FAILED,
        SCHEDULE_FAILED,
        CANCELLED,
        RETRIED,
        RESCHEDULED,
        DELETED,
        DEDUPLICATED,
        DEBOUNCED,
    }
)

# The topic a terminal failure is delivered on, in-process (the listeners' word for it).
SCHEDULE_FAILED_TOPIC: Final = SCHEDULE_FAILED

# Attempt outcomes as recorded by attempt_failed / attempt_succeeded / completed.
SUCCEEDED: Final = "succeeded"
NO_LISTENER: Final = "no_listener"
ATTEMPT_FAILED_OUTCOME: Final = "failed"
TIMED_OUT: Final = "timed_out"
WORKER_LOST: Final = "worker_lost"
INVALID_PAYLOAD: Final = "invalid_payload"
Outcome = Literal[
    "succeeded", "no_listener", "failed", "timed_out", "worker_lost", "invalid_payload"
]
# The outcomes that complete the job (complete.lua); invalid_payload carries its refusal.
SUCCESS_OUTCOMES: Final = (SUCCEEDED, NO_LISTENER, INVALID_PAYLOAD)
FAILED_OUTCOMES: Final = (ATTEMPT_FAILED_OUTCOME, TIMED_OUT, WORKER_LOST)
# A job's outcome with no attempt: a parent of a job scheduled with after= failed for good
# (or was cancelled or deleted) and the job's on_parent_failure is "fail" (lua/_deps.lua).
PARENT_FAILED: Final = "parent_failed"
JOB_OUTCOMES: Final = (PARENT_FAILED,)

# A job's status in the audit trail: active while waiting, running or retrying.
ACTIVE: Final = "active"
STATUS_COMPLETED: Final = COMPLETED
STATUS_FAILED: Final = FAILED
STATUS_CANCELLED: Final = CANCELLED
Status = Literal["active", "completed", "failed", "cancelled"]
TERMINAL_STATUSES: Final = frozenset({STATUS_COMPLETED, STATUS_FAILED, STATUS_CANCELLED})


class ErrorRecord(TypedDict, total=False):
    """The serialized error of a failed attempt (`error` json, `last_error`).

    type, message and traceback are always present; `listener` names the listener
    that raised and `other_failures` lists the others when several did.
    """

    type: str
    message: str
    traceback: str
    listener: str
    other_failures: list[str]


def error_record(type_: str, message: str, traceback: str = "") -> ErrorRecord:
    """An error record of the given type and message (traceback optional)."""
    return {"type": type_, "message": message, "traceback": traceback}


# horae's own dispatch code: its frames tell an operator nothing about the listener's failure.
_OWN_FRAMES = (
    "listeners/dispatch.py",
    "scheduler/worker/attempt.py",
    "scheduler/worker/process_pool.py",
    "scheduler/worker/process_child.py",
)
_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+')


def _without_own_frames(text: str) -> str:
    """`text` of a formatted traceback without the frames of horae's dispatch code (a frame: its
    `File "..."` line and the more indented source and marker lines under it). For a listener
    process's traceback, which reaches the worker as a note of the rebuilt exception."""
    out: list[str] = []
    skipping, indent = False, 0
    for line in text.splitlines(keepends=True):
        m = _FRAME.match(line)
        if m:
            skipping = m.group(1).replace("\\", "/").endswith(_OWN_FRAMES)
            indent = len(line) - len(line.lstrip())
        elif skipping and len(line) - len(line.lstrip()) <= indent:
            skipping = False
        if not skipping:
            out.append(line)
    return "".join(out)


def _trimmed(te: _traceback.TracebackException, frames: int) -> None:
    """`te` (and the exceptions chained to it) with horae's dispatch frames left out, its last
    `frames` frames kept."""
    kept = [f for f in te.stack if not f.filename.replace("\\", "/").endswith(_OWN_FRAMES)]
    te.stack = _traceback.StackSummary.from_list(kept[-frames:])
    notes = getattr(te, "__notes__", None)
    if notes:
        te.__notes__ = [_without_own_frames(str(n)) for n in notes]
    for chained in (te.__cause__, te.__context__):
        if chained is not None:
            _trimmed(chained, frames)


def error_doc(error: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """An error record as every output shows it (CLI JSON, HTTP API): its traceback a list of lines,
    never one string full of \\n (None stays None)."""
    if error is None:
        return None
    doc = dict(error)
    if isinstance(doc.get("traceback"), str):
        doc["traceback"] = doc["traceback"].splitlines()
    return doc


def error_of(exc: BaseException, frames: int = 4) -> ErrorRecord:
    """The error record of an exception: its type, message and its traceback's last `frames` frames,
    the frames of horae's own dispatch code left out (built here once, so every reader shows the
    same)."""
    te = _traceback.TracebackException.from_exception(exc)
    _trimmed(te, frames)
    return error_record(type(exc).__name__, str(exc), "".join(te.format())[-2000:])


class OutboxEvent(NamedTuple):
    """One decoded stream entry (a named tuple: a relay makes one per event it reads, and a
    tuple is made in a third of a frozen dataclass's time)."""

    stream_id: str
    type: str
    job_id: str
    ts_ms: int
    attempt: int
    fields: Mapping[str, str]

    def get(self, name: str, default: str = "") -> str:
        """A type-specific field, or default when absent."""
        return self.fields.get(name, default)


def decode_entry(stream_id: str, fields: Mapping[str, str]) -> OutboxEvent:
    """The event of one outbox entry, whatever it was read from (XREADGROUP, XAUTOCLAIM
    and XRANGE replies decoded to text, or the fields the audit trail stored). The
    fields are kept, not copied.

    Raises:
        ValueError: when the type is unknown, or ts or a is not a number.
        KeyError: when the id or ts field is missing.
    """
    kind = fields.get("e", "")
    if kind not in EVENT_TYPES:
        raise ValueError(f"outbox entry {stream_id}: unknown event type {kind!r}")
    return OutboxEvent(
        stream_id=stream_id,
        type=kind,
        job_id=fields["id"],
        ts_ms=int(fields["ts"]),
        attempt=int(fields.get("a", "0")),
        fields=fields,
    )
