"""The fold of a job whose payload its topic's schema refused: one attempt with
outcome invalid_payload and the refusal as its error; the job completes."""

from __future__ import annotations

import json

from audit.relay.fold import fold_new
from scheduler.core.timeutil import ms_to_utc
from tests.unit.test_audit_fold import CREATED, T0, Stream

REFUSAL = json.dumps(
    {"type": "ValidationError", "message": "payload.to: Field required", "traceback": ""}
)


def test_invalid_payload_completes_the_job_with_the_refusal_in_the_attempt_row() -> None:
    s = Stream()
    s.scheduled()
    s.add("attempt_started", 1, T0 + 100, worker="w", due=T0 + 100)
    s.add(
        "completed",
        1,
        T0 + 110,
        worker="w",
        outcome="invalid_payload",
        duration_ms=1,
        error=REFUSAL,
    )
    out = fold_new("j", CREATED, s.events).result()
    assert (out.job.status, out.job.attempts, out.job.completed_at) == (
        "completed",
        1,
        ms_to_utc(T0 + 110),
    )
    assert (
        out.job.last_error is not None
        and out.job.last_error["message"] == "payload.to: Field required"
    )
    assert [(a.outcome, a.error_type, a.error_message) for a in out.attempts] == [
        ("invalid_payload", "ValidationError", "payload.to: Field required")
    ]


def test_an_invalid_payload_after_a_cancel_is_recorded_and_the_job_stays_cancelled() -> None:
    s = Stream()
    s.scheduled()
    s.add("attempt_started", 1, T0 + 100, worker="w", due=T0 + 100)
    s.add("cancelled", 1, T0 + 105, running=1)
    s.add(
        "attempt_succeeded",
        1,
        T0 + 110,
        worker="w",
        outcome="invalid_payload",
        duration_ms=1,
        error=REFUSAL,
    )
    out = fold_new("j", CREATED, s.events).result()
    assert out.job.status == "cancelled" and [a.outcome for a in out.attempts] == [
        "invalid_payload"
    ]


def test_a_success_still_has_no_error() -> None:
    s = Stream()
    s.scheduled()
    s.add("completed", 1, T0 + 110, worker="w", outcome="succeeded", duration_ms=1)
    out = fold_new("j", CREATED, s.events).result()
    assert out.job.last_error is None and [(a.outcome, a.error_type) for a in out.attempts] == [
        ("succeeded", None)
    ]
