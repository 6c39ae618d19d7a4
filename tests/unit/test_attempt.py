"""One attempt without Redis: the event listeners receive (its payload checked by the
topic's schema), the outcome, the error record and the retry decision of the
settlement it returns."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from listeners import DispatchResult, ListenerFailure, ScheduleArrivedEvent
from scheduler import DoNotRetry, Retry
from scheduler.core.job import ClaimedJob
from scheduler.worker.attempt import lost_settlement, run_attempt, settlement

NOW = 1_800_000_000_000

JOB = ClaimedJob(
    id="j1",
    attempt=1,
    token="w:1",
    topic="billing.charge",
    payload_json='{"invoice":"i-1"}',
    metadata_json='{"tenant":"acme"}',
    run_at_ms=NOW - 500,
    due_ms=NOW - 500,
    max_attempts=3,
    backoff_type="exponential",
    backoff_delay_ms=10_000,
    backoff_max_delay_ms=3_600_000,
    backoff_jitter="none",
    timeout_ms=5_000,
    trace="",
    cron="",
)


def clock() -> int:
    return NOW


async def test_success_hands_listeners_the_event_and_settles_succeeded() -> None:
    seen: list[ScheduleArrivedEvent] = []

    async def listener(event: ScheduleArrivedEvent) -> None:
        seen.append(event)

    settlement = await run_attempt(JOB, [listener], clock)
    assert (settlement.job_id, settlement.token, settlement.outcome) == ("j1", "w:1", "succeeded")
    assert settlement.error is None and settlement.error_json == ""
    assert seen == [
        ScheduleArrivedEvent(
            "j1",
            "billing.charge",
            {"invoice": "i-1"},
            1,
            3,
            datetime.fromtimestamp((NOW - 500) / 1000, UTC),
            {"tenant": "acme"},
        )
    ]


async def test_no_listener_completes_as_no_listener() -> None:
    settlement = await run_attempt(JOB, [], clock)
    assert settlement.outcome == "no_listener" and settlement.error is None


async def fails(event: Any) -> None:
    raise ValueError("card declined")


async def test_a_failure_is_retried_after_the_backoff() -> None:
    settlement = await run_attempt(replace(JOB, attempt=2), [fails], clock)
    assert settlement.outcome == "failed"
    assert settlement.retry_at_ms == NOW + 20_000, "exponential: 10 s, then 20 s after attempt 2"
    error = settlement.error
    assert error is not None and (error["type"], error["message"]) == (
        "ValueError",
        "card declined",
    )
    assert error["listener"].endswith("fails") and "card declined" in error["traceback"]
    assert "other_failures" not in error
    assert json.loads(settlement.error_json) == error


async def test_the_last_attempt_fails_for_good() -> None:
    settlement = await run_attempt(replace(JOB, attempt=3), [fails], clock)
    assert settlement.outcome == "failed" and settlement.retry_at_ms == -1


async def test_a_timeout_has_its_own_outcome_and_error_record() -> None:
    async def slow(event: Any) -> None:
        await asyncio.sleep(5)

    settlement = await run_attempt(replace(JOB, timeout_ms=20), [slow], clock)
    assert settlement.outcome == "timed_out" and settlement.retry_at_ms == NOW + 10_000
    assert settlement.error == {
        "type": "TimeoutError",
        "message": "attempt 1 timed out after 0.02 s",
        "traceback": "",
    }


async def test_retry_with_a_delay_picks_the_delay_and_do_not_retry_ends_the_job() -> None:
    async def later(event: Any) -> None:
        raise Retry(delay=2.5)

    async def never(event: Any) -> None:
        raise DoNotRetry("gone")

    assert (await run_attempt(JOB, [later], clock)).retry_at_ms == NOW + 2_500
    doomed = await run_attempt(JOB, [never], clock)
    assert (
        doomed.retry_at_ms == -1
        and doomed.error is not None
        and doomed.error["type"] == "DoNotRetry"
    )


@pytest.mark.parametrize(("delay_s", "applied_ms"), [(0, 1_000), (1e7, 3_600_000)])
async def test_a_retry_delay_outside_the_bounds_is_clamped_with_a_warning(
    delay_s: float, applied_ms: int, caplog: pytest.LogCaptureFixture
) -> None:
    async def asks(event: Any) -> None:
        raise Retry(delay=delay_s)

    with caplog.at_level(logging.WARNING, logger="horae.worker"):
        settlement = await run_attempt(JOB, [asks], clock)
    assert settlement.retry_at_ms == NOW + applied_ms
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "retry_delay_clamped"]
    assert (record.job_id, record.requested_ms, record.applied_ms) == (
        "j1",
        delay_s * 1000,
        applied_ms,
    )
    assert (
        "job j1" in record.getMessage() and f"retrying after {applied_ms} ms" in record.getMessage()
    )


async def test_a_retry_delay_is_clamped_to_the_jobs_own_cap() -> None:
    async def asks(event: Any) -> None:
        raise Retry(delay=120)

    job = replace(JOB, backoff_max_delay_ms=60_000)
    assert (await run_attempt(job, [asks], clock)).retry_at_ms == NOW + 60_000


def test_the_jobs_cap_and_jitter_place_the_retry() -> None:
    job = replace(JOB, attempt=2, backoff_max_delay_ms=15_000, backoff_jitter="equal")
    result = DispatchResult(listeners=1, failures=(ListenerFailure("l", ValueError("x")),))
    assert settlement(job, result, NOW, lambda: 0.0).retry_at_ms == NOW + 7_500, (
        "20 s capped at 15 s, then equal"
    )
    assert settlement(job, result, NOW, lambda: 0.5).retry_at_ms == NOW + 11_250


async def test_the_first_failing_listener_names_the_error_and_the_others_are_listed() -> None:
    async def also_fails(event: Any) -> None:
        raise KeyError("missing")

    async def fine(event: Any) -> None:
        pass

    settlement = await run_attempt(JOB, [fails, fine, also_fails], clock)
    error = settlement.error
    assert (
        error is not None and error["type"] == "ValueError" and error["listener"].endswith(".fails")
    )
    assert len(error["other_failures"]) == 1
    assert error["other_failures"][0].endswith("also_fails: KeyError('missing')")


def test_a_lost_worker_is_a_failed_attempt_under_the_jobs_retry_rules() -> None:
    lease = {
        "id": "j1",
        "token": "w:2",
        "attempts": "2",
        "worker": "host:1:abc",
        "topic": "t",
        "meta": "{}",
        "max": "5",
        "btype": "fixed",
        "bdelay": "4000",
        "bmax": "3600000",
        "bjit": "none",
    }
    settlement = lost_settlement(lease, NOW)
    assert (settlement.outcome, settlement.retry_at_ms, settlement.require_expired) == (
        "worker_lost",
        NOW + 4_000,
        True,
    )
    assert settlement.error == {
        "type": "WorkerLost",
        "message": "worker host:1:abc lost its lease during attempt 2",
        "traceback": "",
    }
    assert lost_settlement({**lease, "attempts": "5"}, NOW).retry_at_ms == -1
    custom = {**lease, "btype": "exponential", "bdelay": "4000", "bmax": "6000", "bjit": "full"}
    assert lost_settlement(custom, NOW, lambda: 0.5).retry_at_ms == NOW + 3_000, (
        "8 s capped at 6 s, full jitter"
    )


class Invoice(BaseModel):
    invoice: str
    cents: int = 0


async def test_a_schema_hands_listeners_the_parsed_model() -> None:
    seen: list[Any] = []

    async def listener(event: ScheduleArrivedEvent) -> None:
        seen.append(event.payload)

    settlement = await run_attempt(JOB, [listener], clock, validate=Invoice.model_validate)
    assert (
        settlement.outcome == "succeeded"
        and settlement.rejection is None
        and settlement.rejection_json == ""
    )
    assert seen == [Invoice(invoice="i-1")]


async def test_a_refused_payload_completes_as_invalid_payload_without_running_listeners() -> None:
    ran: list[Any] = []

    async def listener(event: ScheduleArrivedEvent) -> None:
        ran.append(event)

    job = replace(JOB, payload_json='{"invoice":7}')
    settlement = await run_attempt(job, [listener], clock, validate=Invoice.model_validate)
    assert ran == []
    assert (settlement.outcome, settlement.error, settlement.retry_at_ms) == (
        "invalid_payload",
        None,
        -1,
    )
    rejection = settlement.rejection
    assert rejection is not None and rejection["type"] == "ValidationError"
    assert rejection["message"] == "payload.invoice: Input should be a valid string (got 7)"
    assert json.loads(settlement.rejection_json)["message"] == rejection["message"]


async def test_a_validator_raising_something_else_is_a_failed_attempt_under_the_retry_rules() -> (
    None
):
    def broken(payload: Any) -> Any:
        raise LookupError("schema registry down")

    settlement = await run_attempt(JOB, [], clock, validate=broken)
    assert settlement.outcome == "failed" and settlement.retry_at_ms == NOW + 10_000
    assert settlement.error is not None and settlement.error["type"] == "LookupError"
    assert settlement.error["listener"].endswith("broken")

    def final(payload: Any) -> Any:
        raise DoNotRetry("not today")

    assert (await run_attempt(JOB, [], clock, validate=final)).retry_at_ms == -1


async def test_a_settlement_carries_the_attempts_own_times_and_retries_from_its_end() -> None:
    """The clock is read before and after the listeners: finished and duration are the attempt's,
    and the retry is due at its end + backoff, however late the settlement reaches Redis."""
    readings = iter([NOW + 5, NOW + 305])

    async def slow_failure(event: Any) -> None:
        raise ValueError("card declined")

    failed = await run_attempt(JOB, [slow_failure], lambda: next(readings))
    assert (failed.started_ms, failed.ended_ms, failed.times) == (
        NOW + 5,
        NOW + 305,
        (NOW + 5, NOW + 305),
    )
    assert failed.retry_at_ms == NOW + 305 + 10_000
    readings = iter([NOW + 1, NOW + 2])
    done = await run_attempt(JOB, [], lambda: next(readings))
    assert (done.started_ms, done.ended_ms) == (NOW + 1, NOW + 2)
    lost = lost_settlement(
        {
            "id": "j1",
            "token": "w:1",
            "attempts": "1",
            "max": "3",
            "btype": "fixed",
            "bdelay": "1000",
            "bmax": "1000",
            "bjit": "none",
        },
        NOW,
    )
    assert lost.times == ("", ""), "a lost worker measured nothing: the script's now"
