"""The pure fold of a job's outbox events into its audit rows: the status
rules of the spec, and convergence whatever the delivery order."""

from __future__ import annotations

import json
import random

from audit.jsontext import dump_json, parse_json
from audit.relay.fold import fold_new
from scheduler.core.outbox import OutboxEvent, decode_entry
from scheduler.core.timeutil import ms_to_utc

T0 = 1_800_000_000_000
CREATED = ms_to_utc(T0)


class Stream:
    """Builds events with increasing stream ids, like XADD does."""

    def __init__(self) -> None:
        self.seq = 0
        self.events: list[OutboxEvent] = []

    def add(
        self, kind: str, attempt: int, ts: int, job: str = "j", **fields: object
    ) -> OutboxEvent:
        self.seq += 1
        raw = {
            "e": kind,
            "id": job,
            "ts": str(ts),
            "a": str(attempt),
            **{k: str(v) for k, v in fields.items()},
        }
        event = decode_entry(f"{1_700_000_000_000 + self.seq // 3}-{self.seq % 3}", raw)
        self.events.append(event)
        return event

    def scheduled(self, ts: int = T0, **over: object) -> None:
        fields: dict[str, object] = dict(
            topic="t",
            run_at=T0 + 1000,
            due=T0 + 1000,
            tz="UTC",
            payload='{"p":1}',
            metadata='{"m":1}',
            max_attempts=3,
            backoff_type="fixed",
            backoff_delay=1000,
            timeout_ms=5000,
            trace="",
            cron="",
        )
        fields.update(over)
        self.add("scheduled", 0, ts, **fields)

    def error(self, message: str) -> str:
        return json.dumps({"type": "E", "message": message, "traceback": "tb"})


def test_success_after_failures_counts_finished_attempts_and_keeps_the_last_error() -> None:
    s = Stream()
    s.scheduled()
    for n in (1, 2):
        s.add("attempt_started", n, T0 + n * 100, worker="w", due=T0 + n * 100 - 3)
        s.add(
            "attempt_failed",
            n,
            T0 + n * 100 + 10,
            worker="w",
            outcome="failed",
            error=s.error(f"e{n}"),
            duration_ms=10,
        )
        s.add("retry_scheduled", n, T0 + n * 100 + 10, next_at=T0 + (n + 1) * 100)
    s.add("attempt_started", 3, T0 + 300, worker="w", due=T0 + 300)
    s.add("completed", 3, T0 + 320, worker="w", outcome="succeeded", duration_ms=20)
    out = fold_new("j", CREATED, s.events).result()
    assert (out.job.status, out.job.attempts, out.job.completed_at) == (
        "completed",
        3,
        ms_to_utc(T0 + 320),
    )
    assert out.job.last_error == {"type": "E", "message": "e2", "traceback": "tb"}
    assert [(a.attempt, a.outcome, a.error_message, a.lateness_ms) for a in out.attempts] == [
        (1, "failed", "e1", 3),
        (2, "failed", "e2", 3),
        (3, "succeeded", None, 0),
    ]
    assert out.job.updated_at == ms_to_utc(T0 + 320)


def test_while_running_attempts_do_not_count_yet() -> None:
    s = Stream()
    s.scheduled()
    s.add("attempt_started", 1, T0 + 100, worker="w", due=T0 + 100)
    out = fold_new("j", CREATED, s.events).result()
    assert (out.job.status, out.job.attempts) == ("active", 0)
    assert out.attempts[0].outcome is None and out.attempts[0].started_at == ms_to_utc(T0 + 100)


def test_terminal_failure_has_no_completed_at() -> None:
    s = Stream()
    s.scheduled(max_attempts=1)
    s.add("attempt_started", 1, T0 + 100, worker="w", due=T0 + 100)
    s.add(
        "attempt_failed",
        1,
        T0 + 110,
        worker="w",
        outcome="timed_out",
        error=s.error("slow"),
        duration_ms=10,
    )
    s.add("failed", 1, T0 + 110, error=s.error("slow"))
    s.add("schedule.failed", 1, T0 + 110, payload="{}")
    out = fold_new("j", CREATED, s.events).result()
    assert (out.job.status, out.job.attempts, out.job.completed_at) == ("failed", 1, None)
    assert out.job.failed_at == ms_to_utc(T0 + 110)
    assert out.attempts[0].outcome == "timed_out"


def test_cancelled_wins_whatever_comes_after_it() -> None:
    s = Stream()
    s.scheduled()
    s.add("attempt_started", 1, T0 + 100, worker="w", due=T0 + 100)
    s.add("cancelled", 1, T0 + 105, running=1)
    s.add(
        "completed", 1, T0 + 120, worker="w", outcome="succeeded", duration_ms=20
    )  # a late completion
    out = fold_new("j", CREATED, s.events).result()
    assert (out.job.status, out.job.cancelled_at, out.job.completed_at) == (
        "cancelled",
        ms_to_utc(T0 + 105),
        None,
    )
    assert (out.job.attempts, out.attempts[0].outcome) == (1, "succeeded")


def test_cancel_after_a_terminal_state_still_wins_and_terminal_states_never_go_back() -> None:
    s = Stream()
    s.scheduled()
    s.add("failed", 1, T0 + 100, error=s.error("x"))
    s.add("completed", 1, T0 + 110, outcome="succeeded")
    assert fold_new("j", CREATED, s.events).result().job.status == "failed"
    s.add("cancelled", 1, T0 + 120, running=0)
    job = fold_new("j", CREATED, s.events).result().job
    assert (job.status, job.failed_at, job.cancelled_at) == ("cancelled", None, ms_to_utc(T0 + 120))


def test_released_attempt_is_refilled_by_its_rerun() -> None:
    s = Stream()
    s.scheduled()
    s.add("attempt_started", 1, T0 + 100, worker="stopping", due=T0 + 100)
    s.add("attempt_released", 1, T0 + 150, worker="stopping")
    assert fold_new("j", CREATED, s.events).result().attempts == ()
    s.add("attempt_started", 1, T0 + 200, worker="w2", due=T0 + 150)
    s.add("completed", 1, T0 + 210, worker="w2", outcome="no_listener", duration_ms=10)
    out = fold_new("j", CREATED, s.events).result()
    assert [(a.worker, a.started_at, a.outcome, a.lateness_ms) for a in out.attempts] == [
        ("w2", ms_to_utc(T0 + 200), "no_listener", 50)
    ]
    assert out.job.attempts == 1


def test_any_order_and_duplicates_give_the_same_rows() -> None:
    s = Stream()
    s.scheduled(trace="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", cron="nightly")
    s.add("attempt_started", 1, T0 + 100, worker="w", due=T0 + 100)
    s.add(
        "attempt_failed",
        1,
        T0 + 110,
        worker="w",
        outcome="worker_lost",
        error=s.error("lost"),
        duration_ms=1,
    )
    s.add("retry_scheduled", 1, T0 + 110, next_at=T0 + 200)
    s.add("attempt_started", 2, T0 + 200, worker="w", due=T0 + 200)
    s.add("attempt_released", 2, T0 + 210, worker="w")
    s.add("attempt_started", 2, T0 + 220, worker="v", due=T0 + 210)
    s.add("cancelled", 2, T0 + 230, running=1)
    s.add(
        "attempt_failed",
        2,
        T0 + 240,
        worker="v",
        outcome="failed",
        error=s.error("late"),
        duration_ms=20,
    )
    expected = fold_new("j", CREATED, s.events).result()
    assert (
        expected.job.trace_id == "0af7651916cd43dd8448eb211c80319c"
        and expected.job.cron_name == "nightly"
    )
    assert (expected.job.status, expected.job.attempts) == ("cancelled", 2)
    rng = random.Random(7)
    for _ in range(200):
        events = s.events + rng.sample(s.events, 3)
        rng.shuffle(events)
        assert fold_new("j", CREATED, events).result() == expected


def test_a_reused_job_id_starts_a_new_life() -> None:
    s = Stream()
    s.scheduled()
    s.add("attempt_started", 1, T0 + 100, worker="w", due=T0 + 100)
    s.add("completed", 1, T0 + 110, worker="w", outcome="succeeded")
    s.scheduled(ts=T0 + 10_000, topic="again")
    out = fold_new("j", CREATED, s.events).result()
    assert (
        out.job.topic,
        out.job.status,
        out.job.attempts,
        out.job.completed_at,
        out.attempts,
    ) == ("again", "active", 0, None, ())


def test_events_before_scheduled_make_a_stub_with_what_they_know() -> None:
    s = Stream()
    s.add("attempt_started", 1, T0 + 100, worker="w", due=T0 + 90, topic="from-start")
    out = fold_new("j", CREATED, s.events).result()
    assert (out.job.topic, out.job.status, out.job.max_attempts, out.job.payload) == (
        "from-start",
        "active",
        None,
        None,
    )


def test_unusual_values_never_poison_a_batch() -> None:
    s = Stream()
    s.scheduled(
        payload="not json", metadata="[1, 2]", max_attempts="many", run_at="", trace="garbage"
    )
    s.add("attempt_failed", 1, T0 + 1, outcome="exploded", error='"just a string"', duration_ms="x")
    out = fold_new("j", CREATED, s.events).result()
    assert (
        out.job.payload == "not json" and out.job.metadata is None and out.job.max_attempts is None
    )
    assert out.job.run_at is None and out.job.trace_id == "garbage"
    assert out.job.last_error == {"type": None, "message": "just a string"}
    assert (out.attempts[0].outcome, out.attempts[0].duration_ms) == ("failed", None)


def test_json_that_jsonb_refuses_is_cleaned() -> None:
    value = parse_json('{"a\\u0000": "x\\u0000y", "s": "\\ud800"}')
    text = dump_json(value)
    assert "\\u0000" not in text and "\\ud800" not in text
    assert json.loads(text) == {"a\ufffd": "x\ufffdy", "s": "\ufffd"}
    assert json.loads(dump_json({"ok": "é"})) == {"ok": "é"}
    assert json.loads(dump_json({1: 2**70})) == {"1": 2**70}, (
        "what orjson refuses, the stdlib writes"
    )


def test_trace_id_of_a_traceparent_else_the_text_as_it_is() -> None:
    cases = {
        " 00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01 ": (
            "0af7651916cd43dd8448eb211c80319c"
        ),
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331": (
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331"
        ),
        "": None,
    }
    for trace, want in cases.items():
        s = Stream()
        s.scheduled(trace=trace)
        assert fold_new("j", CREATED, s.events).result().job.trace_id == want, trace
