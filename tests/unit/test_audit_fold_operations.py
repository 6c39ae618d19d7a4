"""The fold of the job operations' events: `retried` (the one way back from a
terminal state, attempt rows numbered on), `rescheduled` and `deleted`, and
convergence whatever the delivery order."""

from __future__ import annotations

import random

from audit.relay.fold import fold_new
from scheduler.core.timeutil import ms_to_utc
from tests.unit.test_audit_fold import CREATED, T0, Stream


def failed_run(s: Stream, first_ts: int, attempts: int = 2) -> None:
    """A run of `attempts` failed attempts numbered from 1 (as the engine numbers each run)."""
    for n in range(1, attempts + 1):
        ts = first_ts + n * 100
        s.add("attempt_started", n, ts, worker="w", due=ts)
        s.add(
            "attempt_failed",
            n,
            ts + 10,
            worker="w",
            outcome="failed",
            error=s.error(f"e{n}@{first_ts}"),
            duration_ms=10,
        )
        if n < attempts:
            s.add("retry_scheduled", n, ts + 10, next_at=ts + 100)
    s.add("failed", attempts, first_ts + attempts * 100 + 10, error=s.error("last"))


def test_retried_reopens_a_failed_job_and_numbers_its_attempts_on() -> None:
    s = Stream()
    s.scheduled()
    failed_run(s, T0)
    assert fold_new("j", CREATED, s.events).result().job.status == "failed"
    s.add("retried", 2, T0 + 1_000, **{"from": "failed"}, due=T0 + 1_000, actor="alice@host")
    job = fold_new("j", CREATED, s.events).result().job
    assert (job.status, job.attempts, job.failed_at, job.completed_at) == ("active", 2, None, None)
    assert job.last_error is not None and job.last_error["message"] == "last", (
        "history kept until a new error"
    )
    s.add("attempt_started", 1, T0 + 1_100, worker="w", due=T0 + 1_000)
    s.add("completed", 1, T0 + 1_120, worker="w", outcome="succeeded", duration_ms=20)
    out = fold_new("j", CREATED, s.events).result()
    assert (out.job.status, out.job.attempts, out.job.completed_at) == (
        "completed",
        3,
        ms_to_utc(T0 + 1_120),
    )
    assert [(a.attempt, a.outcome, a.lateness_ms) for a in out.attempts] == [
        (1, "failed", 0),
        (2, "failed", 0),
        (3, "succeeded", 100),
    ]


def test_retried_twice_and_from_cancelled_keeps_every_attempt_row() -> None:
    s = Stream()
    s.scheduled()
    failed_run(s, T0, attempts=1)
    s.add("retried", 1, T0 + 1_000, **{"from": "failed"}, due=T0 + 1_000, actor="a")
    s.add("attempt_started", 1, T0 + 1_100, worker="w", due=T0 + 1_000)
    s.add("cancelled", 1, T0 + 1_105, running=1, actor="b")
    s.add(
        "attempt_failed",
        1,
        T0 + 1_110,
        worker="w",
        outcome="failed",
        error=s.error("late"),
        duration_ms=5,
    )
    assert fold_new("j", CREATED, s.events).result().job.status == "cancelled"
    s.add("retried", 1, T0 + 2_000, **{"from": "cancelled"}, due=T0 + 2_000, actor="c")
    s.add("attempt_started", 1, T0 + 2_100, worker="w", due=T0 + 2_000)
    s.add("completed", 1, T0 + 2_110, worker="w", outcome="succeeded", duration_ms=10)
    out = fold_new("j", CREATED, s.events).result()
    assert (out.job.status, out.job.attempts, out.job.cancelled_at) == ("completed", 3, None)
    assert [(a.attempt, a.outcome) for a in out.attempts] == [
        (1, "failed"),
        (2, "failed"),
        (3, "succeeded"),
    ]


def test_rescheduled_moves_run_at_and_tz() -> None:
    s = Stream()
    s.scheduled()
    s.add(
        "rescheduled", 0, T0 + 10, run_at=T0 + 60_000, due=T0 + 60_000, tz="Europe/Paris", actor="a"
    )
    job = fold_new("j", CREATED, s.events).result().job
    assert (job.status, job.run_at, job.tz) == ("active", ms_to_utc(T0 + 60_000), "Europe/Paris")


def test_deleted_ends_an_unfinished_row_cancelled_and_leaves_a_finished_one() -> None:
    s = Stream()
    s.scheduled()
    s.add("deleted", 0, T0 + 10, **{"from": "scheduled"}, actor="a")
    job = fold_new("j", CREATED, s.events).result().job
    assert (job.status, job.cancelled_at) == ("cancelled", ms_to_utc(T0 + 10))
    s.scheduled(ts=T0 + 20)  # the id scheduled again: a new life
    assert fold_new("j", CREATED, s.events).result().job.status == "active"
    done = Stream()
    done.scheduled()
    done.add("attempt_started", 1, T0 + 100, worker="w", due=T0 + 100)
    done.add("completed", 1, T0 + 110, worker="w", outcome="succeeded")
    done.add("deleted", 1, T0 + 200, **{"from": "completed"}, actor="a")
    job = fold_new("j", CREATED, done.events).result().job
    assert (job.status, job.completed_at, job.cancelled_at) == (
        "completed",
        ms_to_utc(T0 + 110),
        None,
    )


def test_a_new_life_after_a_retry_numbers_attempts_from_one_again() -> None:
    s = Stream()
    s.scheduled()
    failed_run(s, T0, attempts=1)
    s.add("retried", 1, T0 + 1_000, **{"from": "failed"}, due=T0 + 1_000, actor="a")
    s.add("deleted", 0, T0 + 1_010, **{"from": "scheduled"}, actor="a")
    s.scheduled(ts=T0 + 2_000)
    s.add("attempt_started", 1, T0 + 2_100, worker="w", due=T0 + 2_000)
    out = fold_new("j", CREATED, s.events).result()
    assert (out.job.status, [a.attempt for a in out.attempts]) == ("active", [1])


def test_operations_in_any_order_and_duplicated_give_the_same_rows() -> None:
    s = Stream()
    s.scheduled()
    s.add("rescheduled", 0, T0 + 10, run_at=T0 + 500, due=T0 + 500, tz="UTC", actor="a")
    failed_run(s, T0 + 500)
    s.add("retried", 2, T0 + 1_000, **{"from": "failed"}, due=T0 + 1_000, actor="a")
    failed_run(s, T0 + 1_000, attempts=1)
    s.add("retried", 1, T0 + 2_000, **{"from": "failed"}, due=T0 + 2_000, actor="b")
    s.add("attempt_started", 1, T0 + 2_100, worker="w", due=T0 + 2_000)
    s.add("completed", 1, T0 + 2_110, worker="w", outcome="succeeded", duration_ms=10)
    expected = fold_new("j", CREATED, s.events).result()
    assert (expected.job.status, expected.job.attempts) == ("completed", 4)
    assert [a.attempt for a in expected.attempts] == [1, 2, 3, 4]
    rng = random.Random(13)
    for _ in range(200):
        events = s.events + rng.sample(s.events, 4)
        rng.shuffle(events)
        assert fold_new("j", CREATED, events).result() == expected


def test_a_resumed_fold_matches_a_fold_from_scratch() -> None:
    s = Stream()
    s.scheduled()
    failed_run(s, T0)
    s.add("retried", 2, T0 + 1_000, **{"from": "failed"}, due=T0 + 1_000, actor="a")
    s.add("attempt_started", 1, T0 + 1_100, worker="w", due=T0 + 1_000)
    s.add("completed", 1, T0 + 1_120, worker="w", outcome="succeeded", duration_ms=20)
    for cut in range(1, len(s.events)):
        fold = fold_new("j", CREATED, s.events[:cut])
        for e in s.events[cut:]:
            fold.apply(e)
        assert fold.result() == fold_new("j", CREATED, s.events).result(), cut
