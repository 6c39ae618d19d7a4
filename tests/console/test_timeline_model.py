"""console/timeline.py without servers: the spans of a job's life in its edge cases (cancelled
before it ran, a retry still ahead, an attempt the audit has not seen start, a relay behind
Redis), the reports each attempt shows, the words and the escaping of the drawing."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from audit.records import AttemptRecord
from console.timeline import _offset, _step, build, duration, svg
from scheduler.core.job import JobInfo, JobState
from scheduler.core.progress import LogLine, Progress

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def job(state: JobState, **fields: object) -> JobInfo:
    base: dict[str, object] = {
        "id": "j",
        "topic": "t",
        "state": state,
        "attempts": 1,
        "max_attempts": 3,
        "run_at": T0,
        "next_attempt_at": None,
        "last_error": None,
        "payload": None,
        "created_at": T0,
    }
    return JobInfo(**{**base, **fields})  # type: ignore[arg-type]


def attempt(
    n: int, start: int, end: int | None, outcome: str | None, **more: object
) -> AttemptRecord:
    return AttemptRecord(
        "j",
        n,
        "w1",
        at(start),
        at(end) if end is not None else None,
        outcome,  # type: ignore[arg-type]
        None,
        None,
        (end - start) if end is not None else None,
        more.pop("lateness", 0),  # type: ignore[arg-type]
        **more,  # type: ignore[arg-type]
    )


def shape(t: object) -> list[tuple[str, str, int | None, bool, bool]]:
    return [(s.kind, s.status, s.attempt, s.planned, s.end is None) for s in t.spans]  # type: ignore[attr-defined]


def test_durations_read_as_people_say_them() -> None:
    assert [duration(ms) for ms in (0, 15, 999, 1000, 1500, 12_300, 60_000, 125_000)] == [
        "0 ms",
        "15 ms",
        "999 ms",
        "1.00 s",
        "1.50 s",
        "12.3 s",
        "1 min",
        "2 min 5 s",
    ]
    assert [duration(ms) for ms in (3_600_000, 11_520_000, 2 * 86_400_000 + 3_600_000 * 3)] == [
        "1 h",
        "3 h 12 min",
        "2 d 3 h",
    ]
    assert [_offset(ms) for ms in (0, 500, 2000, 120_000, 7_200_000, 86_400_000)] == [
        "0",
        "+500 ms",
        "+2 s",
        "+2 min",
        "+2 h",
        "+1 d",
    ]
    assert all(0 < span // _step(span) <= 5 for span in (1, 7, 999, 6200, 3_600_000, 10**11))


def test_a_job_cancelled_before_it_ran_ends_where_it_was_cancelled() -> None:
    j = job(JobState.CANCELLED, attempts=0, run_at=at(60_000), finished_at=at(20_000))
    t = build(j, None, [], at(30_000))
    assert shape(t) == [
        ("scheduled", "scheduled", None, False, False),
        ("terminal", "cancelled", None, False, False),
    ]
    assert t.spans[0].end == at(20_000) and not t.live


def test_a_retry_still_ahead_is_planned_and_the_job_live() -> None:
    j = job(JobState.RETRYING, next_attempt_at=at(61_000))
    t = build(j, None, [attempt(1, 0, 1000, "failed")], at(5000))
    assert shape(t)[-1] == ("retry_wait", "waiting", 2, True, False)
    assert t.spans[-1].summary(t.now) == "next in 56.0 s" and t.live and not t.unsettled
    assert t.bounds() == (T0, at(61_000))


def test_a_running_attempt_is_open_until_now_with_redis_reports() -> None:
    lines = [LogLine("old run", 1, at(-5000)), LogLine("step 1", 1, at(100))]
    j = job(JobState.RUNNING, progress=Progress(30, "a third"), logs=lines)
    t = build(j, None, [attempt(1, 50, None, None, lateness=50)], at(2050))
    assert shape(t) == [
        ("scheduled", "scheduled", None, False, False),
        ("attempt", "running", 1, False, True),
    ]
    running = t.spans[1]
    assert running.summary(t.now) == "running · 2.00 s so far · 50 ms late"
    assert t.spans[0].end == T0  # due at once; started 50 ms later
    [a] = t.attempts
    assert a.progress == (30, "a third") and [e.line for e in a.logs] == ["step 1"]
    assert t.live and t.unsettled and t.bounds() == (T0, at(2050))


def test_an_attempt_the_audit_has_not_seen_start_is_listed_not_drawn() -> None:
    j = job(JobState.RUNNING, attempts=2, progress=Progress(5), logs=[LogLine("go", 2, at(3000))])
    t = build(j, None, [attempt(1, 0, 10, "failed")], at(4000))
    assert [a.number for a in t.attempts] == [1, 2]
    second = t.attempts[1]
    assert second.record.outcome is None and second.started_at is None
    assert second.progress == (5, None) and [e.line for e in second.logs] == ["go"]
    assert [s.kind for s in t.spans] == ["scheduled", "attempt"] and t.unsettled


def test_an_ended_job_whose_attempt_the_audit_has_not_settled_stays_live() -> None:
    j = job(JobState.COMPLETED, finished_at=at(900))
    t = build(j, None, [attempt(1, 0, None, None)], at(1000))
    assert t.state == "completed" and t.live and t.unsettled
    assert shape(t)[-1] == ("terminal", "completed", None, False, False)


def test_settled_lines_keep_their_times_only_when_redis_holds_the_same_ones() -> None:
    kept = ["charging", "declined"]
    held = [LogLine("charging", 1, at(10)), LogLine("declined", 1, at(20))]
    row = attempt(1, 0, 30, "failed", logs=kept, progress_percent=50.0)
    t = build(job(JobState.FAILED, logs=held, finished_at=at(30)), None, [row], at(40))
    assert [(e.line, e.at) for e in t.attempts[0].logs] == [
        ("charging", at(10)),
        ("declined", at(20)),
    ]
    assert t.attempts[0].progress == (50, None)
    trimmed = [LogLine("declined", 1, at(20))]  # Redis dropped the oldest: the audit's copy
    t = build(job(JobState.FAILED, logs=trimmed, finished_at=at(30)), None, [row], at(40))
    assert [(e.line, e.at) for e in t.attempts[0].logs] == [("charging", None), ("declined", None)]


def test_the_drawing_escapes_every_text_and_describes_itself() -> None:
    markup = '<script>x</script>"'
    j = job(JobState.FAILED, id=markup, finished_at=at(12))
    row = attempt(1, 0, 12, "failed")
    drawn = svg(build(j, None, [row], at(20)), markup)
    assert "<script>" not in drawn and "&lt;script&gt;" in drawn
    assert re.search(
        r'<svg class="timeline"[^>]* role="img" aria-labelledby="timeline-title timeline-desc"',
        drawn,
    )
    assert (
        "attempt 1 failed: started 2030-01-01T00:00:00.000Z, ended 2030-01-01T00:00:00.012Z, 12 ms"
        in drawn
    )
    assert drawn.count('class="tl-span') == 3 and "tl-now" not in drawn
    assert svg(build(None, None, [], at(0)), "nothing") == ""
