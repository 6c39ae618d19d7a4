"""One attempt of a job, apart from Redis: the event its listeners receive (its
payload checked against the topic's schema, its reporter for progress and log lines),
their dispatch under the job's timeout, and the settlement that follows (outcome, error
record, retry decision). Also the settlement of an attempt whose worker died."""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, cast

from listeners import (
    DispatchResult,
    Listener,
    ListenerFailure,
    PayloadRejected,
    Reporter,
    ScheduleArrivedEvent,
    Validator,
    call_listener,
    dispatch,
    parse_payload,
    qualified_name,
)
from scheduler.core.errors import LeaseLost, ListenerProcessLost, ResultRefused
from scheduler.core.job import ClaimedJob, Settlement
from scheduler.core.outbox import (
    ATTEMPT_FAILED_OUTCOME,
    INVALID_PAYLOAD,
    NO_LISTENER,
    SUCCEEDED,
    TIMED_OUT,
    WORKER_LOST,
    ErrorRecord,
    error_of,
    error_record,
)
from scheduler.core.progress import log_entry, progress_text
from scheduler.core.results import MAX_RESULT_BYTES, result_json
from scheduler.core.retry import MIN_DELAY_MS, Backoff, BackoffType, Jitter, Rand, RetryPolicy
from scheduler.core.timeutil import ms_to_utc
from scheduler.store.scripts import ReportCode

log = logging.getLogger("horae.worker")

CallListener = Callable[[Listener, Any], Awaitable[Any]]


class ReportStore(Protocol):
    """Where an attempt's reports are kept (RedisStore: lua/set_progress.lua,
    lua/append_log.lua)."""

    async def set_progress(self, job_id: str, token: str, progress: str) -> int: ...

    async def append_log(self, job_id: str, token: str, entry: str) -> int: ...


class AttemptReporter:
    """The reporter of one attempt's event (listeners.Reporter): progress and log lines
    checked and clipped (scheduler/core/progress.py), then kept with the job while this attempt
    holds its lease. Nothing reaches Redis unless a listener calls it."""

    __slots__ = ("_store", "_job", "_now_ms")

    def __init__(self, store: ReportStore, job: ClaimedJob, now_ms: Callable[[], int]) -> None:
        self._store, self._job, self._now_ms = store, job, now_ms

    async def progress(self, percent: float, message: str | None = None) -> None:
        """Replace the job's progress. Raises InvalidProgress (nothing written) or LeaseLost."""
        job = self._job
        self._check(
            await self._store.set_progress(
                job.id, job.token, progress_text(job.attempt, percent, message)
            )
        )

    async def log(self, line: str) -> None:
        """Append a line to the job's log. Raises InvalidProgress (nothing written) or LeaseLost."""
        job = self._job
        self._check(
            await self._store.append_log(
                job.id, job.token, log_entry(job.attempt, self._now_ms(), line)
            )
        )

    def _check(self, code: int) -> None:
        if code != ReportCode.RECORDED:
            raise LeaseLost(
                f"attempt {self._job.attempt} of job {self._job.id} no longer holds its lease "
                "(another worker recovered the job, or the attempt was settled): nothing recorded"
            )


def arrival(
    job: ClaimedJob, validate: Validator | None = None, reporter: Reporter | None = None
) -> ScheduleArrivedEvent:
    """The event every listener of the job's topic receives for this attempt; its payload
    is what `validate` (the topic's schema) parsed, when there is one, and `reporter`
    keeps what its listeners report (event.progress, event.log).

    Raises:
        PayloadRejected: the schema refused the payload.
    """
    payload = json.loads(job.payload_json)
    results = json.loads(job.parent_results_json) if job.parent_results_json else {}
    return ScheduleArrivedEvent(
        scheduled_job_id=job.id,
        topic=job.topic,
        payload=payload if validate is None else parse_payload(validate, payload),
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        run_at=ms_to_utc(job.run_at_ms),
        metadata=json.loads(job.metadata_json),
        parent_results={} if job.flow_root else results,
        children_results=results if job.flow_root else {},
        reporter=reporter,
    )


async def run_attempt(
    job: ClaimedJob,
    listeners: Sequence[Listener],
    now_ms: Callable[[], int],
    call: CallListener = call_listener,
    validate: Validator | None = None,
    reporter: Reporter | None = None,
    result_bytes: int = MAX_RESULT_BYTES,
) -> Settlement:
    """Check the payload, run every listener of the job under its timeout and settle the attempt.

    Args:
        job: the leased attempt.
        listeners: the listeners of job.topic (none: the job completes as no_listener).
        now_ms: the clock; read once the listeners are done, to place a retry.
        call: runs one listener (the worker passes one that adds a span).
        validate: the topic's payload schema (None: the payload is handed on as stored).
        reporter: where event.progress() and event.log() go (None: nowhere).
        result_bytes: the largest result kept ([limits] result_bytes).

    Returns:
        The settlement to write: see settlement(); refused() when the schema refuses the
        payload (no listener runs); a validator raising anything but ValueError/TypeError
        is a failed attempt under the retry rules, like a listener raising it. It carries
        the clock's readings before and after the listeners: the attempt's own times,
        whenever the settlement reaches Redis.
    """
    started = now_ms()
    try:
        event = arrival(job, validate, reporter)
    except PayloadRejected as exc:
        return refused(job, exc, started, now_ms())
    except Exception as exc:  # noqa: BLE001 - a broken validator fails the attempt, as a listener would
        failure = ListenerFailure(qualified_name(validate) if validate else "?", exc)
        return settlement(
            job, DispatchResult(listeners=1, failures=(failure,)), now_ms(), started_ms=started
        )
    result = await dispatch(listeners, event, job.timeout_ms / 1000, call)
    return settlement(job, result, now_ms(), started_ms=started, result_bytes=result_bytes)


def refused(
    job: ClaimedJob,
    exc: PayloadRejected,
    started_ms: int | None = None,
    ended_ms: int | None = None,
) -> Settlement:
    """The settlement of an attempt whose payload its topic's schema refused: the job completes
    as invalid_payload (a retry would see the same payload), the refusal recorded with it."""
    rejection = error_record(type(exc.cause).__name__, str(exc))
    return Settlement(
        job.id,
        job.token,
        INVALID_PAYLOAD,
        rejection=rejection,
        started_ms=started_ms,
        ended_ms=ended_ms,
    )


def settlement(
    job: ClaimedJob,
    result: DispatchResult,
    now_ms: int,
    rand: Rand = random.random,
    started_ms: int | None = None,
    result_bytes: int = MAX_RESULT_BYTES,
) -> Settlement:
    """The settlement of a dispatched attempt: succeeded or no_listener (with the listeners'
    result, if they returned one); else failed, timed_out or worker_lost (the child process of a
    listener died) with its error record and the retry decision (retry_at_ms -1: for good). A
    result that cannot be kept (over `result_bytes`, not JSON) fails the attempt as a listener
    raising would (error type result_too_large / result_not_serializable, naming the listener).

    `now_ms` is when the listeners finished (the attempt's end, ended_ms) and `started_ms`
    when they started. A retry is due at that end + backoff: never earlier, though the
    settlement may reach Redis later (an outage); then it is due at once, the backoff
    having passed since the attempt ended. `rand` draws the backoff's jitter."""
    if result.ok:
        try:
            kept = result_json(result.results, result.listeners > 1, result_bytes)
        except ResultRefused as refusal:
            failure = ListenerFailure(refusal.listener, refusal)
            result = DispatchResult(listeners=result.listeners, failures=(failure,))
        else:
            return Settlement(
                job.id,
                job.token,
                SUCCEEDED if result.listeners else NO_LISTENER,
                started_ms=started_ms,
                ended_ms=now_ms,
                result_json=kept,
            )
    error, exc = failure_record(job, result)
    backoff = stored_backoff(
        job.backoff_type, job.backoff_delay_ms, job.backoff_max_delay_ms, job.backoff_jitter
    )
    return Settlement(
        job.id,
        job.token,
        TIMED_OUT
        if result.timed_out
        else WORKER_LOST
        if isinstance(exc, ListenerProcessLost)
        else ATTEMPT_FAILED_OUTCOME,
        error,
        retry_at(
            job.id,
            job.max_attempts,
            backoff,
            attempt=job.attempt,
            exc=exc,
            now_ms=now_ms,
            rand=rand,
        ),
        started_ms=started_ms,
        ended_ms=now_ms,
    )


def failure_record(
    job: ClaimedJob, result: DispatchResult
) -> tuple[ErrorRecord, BaseException | None]:
    """The error record of a failed attempt and the exception behind it (None on timeout).

    The first failing listener names the error; the others are listed in other_failures.
    """
    if result.timed_out:
        message = f"attempt {job.attempt} timed out after {job.timeout_ms / 1000:g} s"
        return error_record("TimeoutError", message), None
    first = result.failures[0]
    if isinstance(first.exception, ResultRefused):  # ours, not the listener's: no traceback
        record = error_record(first.exception.code, str(first.exception))
    else:
        record = error_of(first.exception)
    record["listener"] = first.listener
    if len(result.failures) > 1:
        record["other_failures"] = [f"{f.listener}: {f.exception!r}" for f in result.failures[1:]]
    return record, first.exception


def stored_backoff(backoff_type: str, delay_ms: int, max_delay_ms: int, jitter: str) -> Backoff:
    """A job's backoff from its stored fields (validated when the job was scheduled)."""
    return Backoff(cast(BackoffType, backoff_type), delay_ms, max_delay_ms, cast(Jitter, jitter))


def retry_at(
    job_id: str,
    max_attempts: int,
    backoff: Backoff,
    attempt: int,
    exc: BaseException | None,
    now_ms: int,
    rand: Rand = random.random,
) -> int:
    """When the next attempt is due after attempt `attempt` failed with `exc`; -1 when none is.

    The policy is the job's stored one; a listener's Retry(delay=) or DoNotRetry decides first.
    A Retry(delay=) outside [1 s, the job's max_delay] is clamped into it, with a WARN
    naming the job, the requested and the applied delay.
    """
    decision = RetryPolicy(max_attempts, backoff).decide(attempt, exc, rand)
    if decision is None:
        return -1
    if decision.requested_ms is not None:
        log.warning(
            "job %s: Retry(delay=) asked for %s ms, outside %d..%d ms; retrying after %d ms",
            job_id,
            f"{decision.requested_ms:g}",
            MIN_DELAY_MS,
            backoff.max_delay_ms,
            decision.delay_ms,
            extra={
                "event": "retry_delay_clamped",
                "job_id": job_id,
                "requested_ms": decision.requested_ms,
                "applied_ms": decision.delay_ms,
            },
        )
    return now_ms + decision.delay_ms


def lost_settlement(
    lease: Mapping[str, str], now_ms: int, rand: Rand = random.random
) -> Settlement:
    """The settlement of an attempt whose lease expired (its worker died): a failed attempt
    (WorkerLost) under the job's retry rules, written only if the lease is still expired.

    Args:
        lease: the running job's fields as store.expired_leases returns them.
        now_ms: the clock at recovery.
        rand: draws the backoff's jitter.
    """
    attempt = int(lease["attempts"])
    backoff = stored_backoff(
        lease["btype"], int(lease["bdelay"]), int(lease["bmax"]), lease["bjit"]
    )
    error = error_record(
        "WorkerLost", f"worker {lease.get('worker', '?')} lost its lease during attempt {attempt}"
    )
    return Settlement(
        lease["id"],
        lease["token"],
        WORKER_LOST,
        error,
        retry_at(
            lease["id"],
            int(lease["max"]),
            backoff,
            attempt=attempt,
            exc=None,
            now_ms=now_ms,
            rand=rand,
        ),
        require_expired=True,
    )
