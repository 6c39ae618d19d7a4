"""Each job path, XADDed in the outbox format and relayed into Postgres: the
exact audit row and attempt rows that must come out."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from audit.relay.consumer import AuditRelay
from audit.relay.streamid import parse_id
from scheduler.core.timeutil import ms_to_utc as at

T0 = 1_800_000_000_000  # audit_outbox.START_MS: the `scheduled` ts of every job here
RUN_AT = T0 + 1_000

Row = dict[str, Any]


def job_row(job_id: str, **changes: Any) -> Row:
    row: Row = dict(
        id=job_id,
        topic="billing.charge",
        status="active",
        attempts=0,
        max_attempts=3,
        backoff_type="exponential",
        backoff_delay_ms=1_000,
        last_error=None,
        run_at=at(RUN_AT),
        tz="Europe/Paris",
        payload={"invoice": job_id},
        metadata={"tenant": "acme"},
        trace_id=None,
        cron_name=None,
        created_at=at(T0),
        updated_at=at(T0),
        completed_at=None,
        failed_at=None,
        cancelled_at=None,
        deduplicated=0,
        parents=None,
    )
    row.update(changes)
    return row


def attempt_row(
    job_id: str,
    n: int,
    started: int | None,
    finished: int | None,
    outcome: str | None,
    duration: int | None,
    lateness: int | None,
    error: tuple[str, str] | None = None,
    worker: str = "w1",
) -> Row:
    return dict(
        job_id=job_id,
        attempt_no=n,
        worker_id=worker,
        started_at=at(started) if started else None,
        finished_at=at(finished) if finished else None,
        outcome=outcome,
        error_type=error[0] if error else None,
        error_message=error[1] if error else None,
        duration_ms=duration,
        lateness_ms=lateness,
        job_created_at=at(T0),
        progress_percent=None,
        progress_message=None,
        logs=None,
        result=None,
    )


def err(kind: str, message: str) -> dict[str, str]:
    return {"type": kind, "message": message, "traceback": "Traceback ..."}


async def success_first_try(ob: Any, j: str) -> tuple[Row, list[Row]]:
    await ob.scheduled(j)
    ob.now = RUN_AT + 7
    await ob.started(j, 1, due=RUN_AT)
    ob.now = RUN_AT + 30
    await ob.completed(j, 1)
    done = RUN_AT + 30
    return (
        job_row(j, status="completed", attempts=1, completed_at=at(done), updated_at=at(done)),
        [attempt_row(j, 1, RUN_AT + 7, done, "succeeded", 15, 7)],
    )


async def success_after_two_failures(ob: Any, j: str) -> tuple[Row, list[Row]]:
    await ob.scheduled(j)
    rows = []
    due = RUN_AT
    for n in (1, 2):
        ob.now = due + 3
        await ob.started(j, n, due=due)
        ob.now = due + 50
        await ob.attempt_failed(j, n, message=f"boom {n}")
        await ob.retry_scheduled(j, n, next_at=due + 1_050)
        rows.append(
            attempt_row(j, n, due + 3, due + 50, "failed", 20, 3, ("ValueError", f"boom {n}"))
        )
        due += 1_050
    ob.now = due + 4
    await ob.started(j, 3, due=due)
    ob.now = due + 40
    # what its listeners returned, as written (numbers beyond a double kept exactly)
    await ob.completed(j, 3, result='{"sent":2,"big":123456789012345678901234567890}')
    last = attempt_row(j, 3, due + 4, due + 40, "succeeded", 15, 4)
    rows.append({**last, "result": {"sent": 2, "big": 123456789012345678901234567890}})
    return (
        job_row(
            j,
            status="completed",
            attempts=3,
            last_error=err("ValueError", "boom 2"),
            completed_at=at(due + 40),
            updated_at=at(due + 40),
        ),
        rows,
    )


async def terminal_failure(ob: Any, j: str) -> tuple[Row, list[Row]]:
    await ob.scheduled(j)
    rows = []
    due = RUN_AT
    for n in (1, 2, 3):
        ob.now = due + 2
        await ob.started(j, n, due=due)
        ob.now = due + 60
        await ob.attempt_failed(j, n, message=f"boom {n}")
        if n < 3:
            await ob.retry_scheduled(j, n, next_at=due + 1_000)
        rows.append(
            attempt_row(j, n, due + 2, due + 60, "failed", 20, 2, ("ValueError", f"boom {n}"))
        )
        due += 1_000
    await ob.failed(j, 3, message="boom 3")
    await ob.schedule_failed(j, 3)
    end = due - 1_000 + 60
    return (
        job_row(
            j,
            status="failed",
            attempts=3,
            last_error=err("ValueError", "boom 3"),
            failed_at=at(end),
            completed_at=None,
            updated_at=at(end),
        ),
        rows,
    )


async def no_listener(ob: Any, j: str) -> tuple[Row, list[Row]]:
    await ob.scheduled(j)
    ob.now = RUN_AT
    await ob.started(j, 1, due=RUN_AT)
    ob.now = RUN_AT + 1
    await ob.completed(j, 1, outcome="no_listener", duration=1)
    return (
        job_row(
            j,
            status="completed",
            attempts=1,
            completed_at=at(RUN_AT + 1),
            updated_at=at(RUN_AT + 1),
        ),
        [attempt_row(j, 1, RUN_AT, RUN_AT + 1, "no_listener", 1, 0)],
    )


async def timed_out(ob: Any, j: str) -> tuple[Row, list[Row]]:
    await ob.scheduled(j, max_attempts=1)
    ob.now = RUN_AT + 9
    await ob.started(j, 1, due=RUN_AT)
    ob.now = RUN_AT + 5_009
    await ob.attempt_failed(
        j,
        1,
        outcome="timed_out",
        error_type="TimeoutError",
        message="timed out after 5s",
        duration=5_000,
    )
    await ob.failed(j, 1, error_type="TimeoutError", message="timed out after 5s")
    await ob.schedule_failed(j, 1)
    end = RUN_AT + 5_009
    return (
        job_row(
            j,
            max_attempts=1,
            status="failed",
            attempts=1,
            failed_at=at(end),
            updated_at=at(end),
            last_error=err("TimeoutError", "timed out after 5s"),
        ),
        [
            attempt_row(
                j, 1, RUN_AT + 9, end, "timed_out", 5_000, 9, ("TimeoutError", "timed out after 5s")
            )
        ],
    )


async def worker_lost(ob: Any, j: str) -> tuple[Row, list[Row]]:
    await ob.scheduled(j)
    ob.now = RUN_AT + 1
    await ob.started(j, 1, due=RUN_AT, worker="w-dead")
    ob.now = RUN_AT + 30_001  # the lease expired; another worker recovers the job
    await ob.attempt_failed(
        j,
        1,
        outcome="worker_lost",
        error_type="WorkerLost",
        message="lease expired",
        worker="w-dead",
        duration=30_000,
    )
    await ob.retry_scheduled(j, 1, next_at=RUN_AT + 31_001)
    ob.now = RUN_AT + 31_011
    await ob.started(j, 2, due=RUN_AT + 31_001, worker="w2")
    ob.now = RUN_AT + 31_031
    await ob.completed(j, 2, worker="w2")
    end = RUN_AT + 31_031
    return (
        job_row(
            j,
            status="completed",
            attempts=2,
            last_error=err("WorkerLost", "lease expired"),
            completed_at=at(end),
            updated_at=at(end),
        ),
        [
            attempt_row(
                j,
                1,
                RUN_AT + 1,
                RUN_AT + 30_001,
                "worker_lost",
                30_000,
                1,
                ("WorkerLost", "lease expired"),
                worker="w-dead",
            ),
            attempt_row(j, 2, RUN_AT + 31_011, end, "succeeded", 15, 10, worker="w2"),
        ],
    )


async def cancel_while_waiting(ob: Any, j: str) -> tuple[Row, list[Row]]:
    await ob.scheduled(j)
    ob.now = T0 + 500
    await ob.cancelled(j, 0, running=False)
    return job_row(j, status="cancelled", cancelled_at=at(T0 + 500), updated_at=at(T0 + 500)), []


async def cancel_while_retrying(ob: Any, j: str) -> tuple[Row, list[Row]]:
    await ob.scheduled(j)
    ob.now = RUN_AT + 2
    await ob.started(j, 1, due=RUN_AT)
    ob.now = RUN_AT + 22
    await ob.attempt_failed(j, 1)
    await ob.retry_scheduled(j, 1, next_at=RUN_AT + 1_022)
    ob.now = RUN_AT + 500
    await ob.cancelled(j, 1, running=False)
    return (
        job_row(
            j,
            status="cancelled",
            attempts=1,
            last_error=err("ValueError", "boom"),
            cancelled_at=at(RUN_AT + 500),
            updated_at=at(RUN_AT + 500),
        ),
        [attempt_row(j, 1, RUN_AT + 2, RUN_AT + 22, "failed", 20, 2, ("ValueError", "boom"))],
    )


async def cancel_while_running(ob: Any, j: str) -> tuple[Row, list[Row]]:
    await ob.scheduled(j)
    ob.now = RUN_AT + 5
    await ob.started(j, 1, due=RUN_AT)
    ob.now = RUN_AT + 10
    await ob.cancelled(j, 1, running=True)
    ob.now = RUN_AT + 40  # the attempt finishes after the cancel: recorded, status stays cancelled
    await ob.attempt_succeeded(j, 1, result='"late"')  # its result is the attempt's, kept
    return (
        job_row(
            j,
            status="cancelled",
            attempts=1,
            cancelled_at=at(RUN_AT + 10),
            updated_at=at(RUN_AT + 40),
        ),
        [{**attempt_row(j, 1, RUN_AT + 5, RUN_AT + 40, "succeeded", 15, 5), "result": "late"}],
    )


async def released_then_rerun(ob: Any, j: str) -> tuple[Row, list[Row]]:
    await ob.scheduled(j)
    ob.now = RUN_AT + 1
    await ob.started(j, 1, due=RUN_AT, worker="w-stopping")
    ob.now = RUN_AT + 100
    await ob.released(j, 1, worker="w-stopping")  # graceful stop: attempt 1 does not count
    ob.now = RUN_AT + 150
    await ob.started(j, 1, due=RUN_AT + 100, worker="w2")
    ob.now = RUN_AT + 170
    await ob.completed(j, 1, worker="w2")
    return (
        job_row(
            j,
            status="completed",
            attempts=1,
            completed_at=at(RUN_AT + 170),
            updated_at=at(RUN_AT + 170),
        ),
        [attempt_row(j, 1, RUN_AT + 150, RUN_AT + 170, "succeeded", 15, 50, worker="w2")],
    )


Scenario = Callable[[Any, str], Awaitable[tuple[Row, list[Row]]]]
SCENARIOS: list[Scenario] = [
    success_first_try,
    success_after_two_failures,
    terminal_failure,
    no_listener,
    timed_out,
    worker_lost,
    cancel_while_waiting,
    cancel_while_retrying,
    cancel_while_running,
    released_then_rerun,
]


async def fetch_rows(db: asyncpg.Connection, job_id: str) -> tuple[Row | None, list[Row]]:
    """The job's rows, without the relay's bookkeeping (applied_*: see test_path_rows)."""
    job = await db.fetchrow("SELECT * FROM schedule_audit WHERE id = $1", job_id)
    attempts = await db.fetch(
        "SELECT * FROM schedule_attempts WHERE job_id = $1 ORDER BY attempt_no", job_id
    )
    row = {k: v for k, v in job.items() if k not in ("applied_ms", "applied_seq")} if job else None
    return row, [dict(a) for a in attempts]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
async def test_path_rows(
    scenario: Scenario,
    outbox: Any,
    relay: AuditRelay,
    db: asyncpg.Connection,
    drain: Callable[[AuditRelay], Awaitable[int]],
) -> None:
    expected_job, expected_attempts = await scenario(outbox, "job-1")
    assert await drain(relay) == len(outbox.ids)
    job, attempts = await fetch_rows(db, "job-1")
    applied = await db.fetchrow(
        "SELECT applied_ms, applied_seq FROM schedule_audit WHERE id = 'job-1'"
    )
    assert tuple(applied) == parse_id(outbox.ids[-1]), "the last event folded into the row"
    assert job == expected_job
    assert attempts == expected_attempts
    logged = await db.fetch(
        "SELECT stream_ms || '-' || stream_seq AS sid FROM schedule_events "
        "ORDER BY stream_ms, stream_seq"
    )
    assert [
        r["sid"] for r in logged
    ] == outbox.ids  # every event, schedule.failed included, exactly once


async def test_terminal_failure_logs_schedule_failed(
    outbox: Any,
    relay: AuditRelay,
    db: asyncpg.Connection,
    drain: Callable[[AuditRelay], Awaitable[int]],
) -> None:
    await terminal_failure(outbox, "job-f")
    await drain(relay)
    row = await db.fetchrow(
        "SELECT job_id, attempt_no FROM schedule_events WHERE event_type = 'schedule.failed'"
    )
    assert row is not None
    assert (row["job_id"], row["attempt_no"]) == ("job-f", 3)


async def test_all_paths_in_one_stream_keep_jobs_apart(
    outbox: Any,
    relay: AuditRelay,
    db: asyncpg.Connection,
    drain: Callable[[AuditRelay], Awaitable[int]],
) -> None:
    """Interleaved jobs in one batch: each job's rows are still exactly its own."""
    expected = {}
    for scenario in SCENARIOS:
        outbox.now = T0
        expected[scenario.__name__] = await scenario(outbox, scenario.__name__)
    assert await drain(relay) == len(outbox.ids)
    for name, (job, attempts) in expected.items():
        assert await fetch_rows(db, name) == (job, attempts), name


async def test_a_result_reaches_an_attempt_row_stored_earlier(
    outbox: Any,
    relay: AuditRelay,
    db: asyncpg.Connection,
    drain: Callable[[AuditRelay], Awaitable[int]],
) -> None:
    """The attempt row is stored when it starts (a batch of its own: COPY), and its result comes
    with the completion in a later batch (the upsert: upsert_attempts)."""
    await outbox.scheduled("job-r")
    outbox.now = RUN_AT + 7
    await outbox.started("job-r", 1, due=RUN_AT)
    await drain(relay)
    [running] = (await fetch_rows(db, "job-r"))[1]
    assert running["outcome"] is None and running["result"] is None
    outbox.now = RUN_AT + 30
    await outbox.completed("job-r", 1, result='[1,"é",{"k":null}]')
    await drain(relay)
    [done] = (await fetch_rows(db, "job-r"))[1]
    assert done["outcome"] == "succeeded" and done["result"] == [1, "é", {"k": None}]
