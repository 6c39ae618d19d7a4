"""Delivery guarantees of the relay on a real Redis and Postgres: duplicates
change nothing, out-of-order batches converge, a dead consumer's entries are
claimed, the stream is trimmed behind the slowest group, lag and flush."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis

from audit.options import RelayOptions
from audit.reader import AuditTrail
from audit.relay.consumer import AuditRelay
from audit.relay.stream import Entry
from audit.relay.streamid import next_id, parse_id
from scheduler.core.keys import Keys
from scheduler.core.timeutil import ms_to_utc as at
from tests.integration.engine_fixtures import eventually

Drain = Callable[[AuditRelay], Awaitable[int]]
TABLES = ("schedule_audit", "schedule_attempts", "schedule_events", "schedule_job_index")


async def dump(db: asyncpg.Connection) -> dict[str, list[dict[str, Any]]]:
    """Every row of every audit table, with the partition it lives in and its row version (xmin)."""
    out = {}
    for table in TABLES:
        rows = await db.fetch(
            f"SELECT tableoid::regclass::text AS part, xmin::text AS version, * FROM {table}"
        )
        out[table] = sorted(
            (dict(r) for r in rows), key=lambda r: json.dumps(r, default=str, sort_keys=True)
        )
    return out


def without_versions(snapshot: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Content only (row versions and arrival times differ between separate databases)."""
    return {
        t: sorted(
            ({k: v for k, v in r.items() if k not in ("version", "received_at")} for r in rows),
            key=lambda r: json.dumps(r, default=str, sort_keys=True),
        )
        for t, rows in snapshot.items()
    }


async def empty(db: asyncpg.Connection) -> None:
    """Truncate every audit table (the relay's fold cache is left as it is)."""
    for table in TABLES:
        await db.execute(f"TRUNCATE {table}")


async def folded_at_once(relay: AuditRelay, db: asyncpg.Connection, entries: list[Any]) -> Any:
    """The rows after the tables are emptied and `entries` written in one batch."""
    await empty(db)
    await relay.write_batch(entries)
    return without_versions(await dump(db))


async def busy_job(
    ob: Any, j: str, due: int, *, schedule: bool = True, late_completion: bool = False
) -> None:
    """A job exercising every event type: failures, a released attempt, cancel while running.

    schedule=False leaves out the `scheduled` event (the caller sends it elsewhere);
    late_completion ends with `completed` instead of attempt 2's failure: not what the
    engine sends after a cancel, but cancelled must still win.
    """
    if schedule:
        await ob.scheduled(j, run_at=due)
    ob.now = due + 1
    await ob.started(j, 1, due=due)
    ob.tick(10)
    await ob.attempt_failed(j, 1, message="first")
    await ob.retry_scheduled(j, 1, next_at=ob.now + 100)
    ob.tick(100)
    await ob.started(j, 2, due=ob.now, worker="w-stop")
    ob.tick(5)
    await ob.released(j, 2, worker="w-stop")
    ob.tick(5)
    await ob.started(j, 2, due=ob.now - 5, worker="w2")
    ob.tick(5)
    await ob.cancelled(j, 2, running=True)
    ob.tick(5)
    if late_completion:
        await ob.completed(j, 2, worker="w2")
    else:
        await ob.attempt_failed(j, 2, message="second", worker="w2")


async def all_entries(redis: aioredis.Redis, key: str) -> list[Entry]:
    rows = await redis.xrange(key)
    return [
        Entry(sid.decode(), {k.decode(): v.decode() for k, v in fields.items()})
        for sid, fields in rows
    ]


async def test_duplicate_delivery_changes_nothing(
    outbox: Any,
    relay: AuditRelay,
    redis: aioredis.Redis,
    namespace: str,
    database_url: str,
    db: asyncpg.Connection,
    relay_options: RelayOptions,
    drain: Drain,
) -> None:
    await busy_job(outbox, "dup", outbox.now + 1_000)
    await outbox.completed("other", 1)  # an event whose job the trail never saw scheduled
    # relay A commits the batch and "crashes" before XACK
    batch = await relay.read_batch()
    assert len(batch) == len(outbox.ids)
    assert await relay.write_batch(batch) == len(outbox.ids)
    before = await dump(db)
    # a second relay claims the entries once they idle past claim_idle_ms and applies them again
    other = AuditRelay(redis, namespace, database_url, relay_options)
    try:
        assert await other.step() == 0  # not idle long enough yet: nothing to claim
        await asyncio.sleep(relay_options.claim_idle_ms / 1000 + 0.1)
        assert await drain(other) == len(outbox.ids)
        assert await relay.write_batch(batch) == 0  # and once more, directly
    finally:
        await other.stop()
    assert await dump(db) == before  # same rows, same row versions: nothing was even rewritten
    assert (await redis.xpending(Keys(namespace).outbox, "audit"))["pending"] == 0


async def test_out_of_order_batches_converge(
    outbox: Any, relay: AuditRelay, redis: aioredis.Redis, db: asyncpg.Connection, drain: Drain
) -> None:
    # `scheduled` lands in January; everything else happens in March (another partition).
    jan = int(datetime(2027, 1, 31, 23, 0, tzinfo=UTC).timestamp() * 1000)
    march = int(datetime(2027, 3, 2, tzinfo=UTC).timestamp() * 1000)
    outbox.now = jan
    await outbox.scheduled("ooo", run_at=march)
    await busy_job(outbox, "ooo", march, schedule=False, late_completion=True)
    entries = await all_entries(redis, outbox.key)
    await relay.write_batch(entries)
    expected = without_versions(await dump(db))
    assert expected["schedule_audit"][0]["part"] == "schedule_audit_p202701"
    assert expected["schedule_audit"][0]["status"] == "cancelled"
    orders = [list(reversed(entries)), entries[1:] + entries[:1], entries[3:] + entries[:3]]
    orders += [
        list(p) + entries[5:] for p in itertools.islice(itertools.permutations(entries[:5]), 7, 12)
    ]
    for order in orders:
        for table in TABLES:
            await db.execute(f"TRUNCATE {table}")
        for chunk in range(0, len(order), 2):  # batches of two, in this order
            await relay.write_batch(order[chunk : chunk + 2])
        for chunk in range(0, len(order), 3):  # and everything re-delivered in other batches
            await relay.write_batch(order[chunk : chunk + 3])
        assert without_versions(await dump(db)) == expected, [
            e.fields["e"] for e in order if e.fields
        ]


async def test_dead_consumer_batch_applied_after_later_one(
    outbox: Any,
    relay: AuditRelay,
    redis: aioredis.Redis,
    namespace: str,
    database_url: str,
    db: asyncpg.Connection,
    relay_options: RelayOptions,
    drain: Drain,
) -> None:
    """Relay A dies holding `scheduled` + `attempt_started`; B applies the rest first, then claims
    A's."""
    opts = replace(relay_options, batch_size=2)
    dead = AuditRelay(redis, namespace, database_url, opts)
    live = AuditRelay(redis, namespace, database_url, opts)
    await outbox.scheduled("late")
    due = outbox.now + 1_000
    outbox.now = due + 3
    await outbox.started("late", 1, due=due)
    outbox.now = due + 40
    await outbox.completed("late", 1)
    try:
        assert len(await dead.read_batch()) == 2  # ... and dies
        assert await drain(live) == 1  # `completed` for a job Postgres has never seen
        stub = await db.fetchrow("SELECT status, topic, created_at FROM schedule_audit")
        assert (stub["status"], stub["topic"], stub["created_at"]) == (
            "completed",
            "",
            at(due + 40),
        )
        await asyncio.sleep(opts.claim_idle_ms / 1000 + 0.1)
        assert await drain(live) == 2
    finally:
        await live.stop()
        await (
            dead.stream.aclose()
        )  # a dead process's connections go with it (it deregisters nothing)
    row = await db.fetchrow("SELECT * FROM schedule_audit")
    assert (
        row["status"],
        row["attempts"],
        row["topic"],
        row["created_at"],
        row["completed_at"],
    ) == ("completed", 1, "billing.charge", at(1_800_000_000_000), at(due + 40))
    attempt = await db.fetchrow("SELECT * FROM schedule_attempts")
    assert (attempt["started_at"], attempt["outcome"], attempt["lateness_ms"]) == (
        at(due + 3),
        "succeeded",
        3,
    )
    assert await db.fetchval("SELECT count(*) FROM schedule_job_index") == 1
    assert await db.fetchval("SELECT count(*) FROM schedule_events") == 3


async def test_stream_trimmed_behind_the_slowest_group(
    outbox: Any, relay: AuditRelay, redis: aioredis.Redis, drain: Drain
) -> None:
    for i in range(6):
        await outbox.scheduled(f"t{i}")
    await redis.xgroup_create(outbox.key, "slow", id="0")
    await redis.xreadgroup("slow", "s1", {outbox.key: ">"}, count=2)  # delivered 2, both pending
    await drain(relay)
    assert await relay.trim() == parse_id(
        outbox.ids[0]
    )  # "slow" still needs its first pending entry
    assert await redis.xlen(outbox.key) == 6
    await redis.xack(outbox.key, "slow", outbox.ids[0])
    assert await relay.trim() == parse_id(outbox.ids[1])
    assert await redis.xlen(outbox.key) == 5
    await redis.xack(outbox.key, "slow", outbox.ids[1])
    assert await relay.trim() == next_id(
        parse_id(outbox.ids[1])
    )  # nothing pending: up to last delivered
    assert [sid.decode() for sid, _ in await redis.xrange(outbox.key)] == outbox.ids[2:]
    await redis.xgroup_destroy(outbox.key, "slow")
    assert await relay.trim() == next_id(parse_id(outbox.ids[-1]))
    assert await redis.xlen(outbox.key) == 0
    await outbox.scheduled("after-trim")
    assert await drain(relay) == 1


async def test_relay_keeps_pending_entries_of_its_own_group(
    outbox: Any, relay: AuditRelay, redis: aioredis.Redis
) -> None:
    for i in range(3):
        await outbox.scheduled(f"p{i}")
    assert len(await relay.read_batch()) == 3  # delivered, not yet committed
    assert await relay.trim() == parse_id(outbox.ids[0])
    assert await redis.xlen(outbox.key) == 3


async def test_lag_counts_uncommitted_events_and_their_age(
    outbox: Any,
    relay: AuditRelay,
    redis: aioredis.Redis,
    namespace: str,
    relay_options: RelayOptions,
    drain: Drain,
) -> None:
    assert await relay.lag() == (0, None)
    for i in range(5):
        await outbox.scheduled(f"l{i}")
    await asyncio.sleep(0.25)
    pending, age = await relay.lag()  # the group does not exist yet: the whole stream waits
    assert pending == 5 and age is not None and 0.25 <= age < 5
    await relay.stream.ensure_group()
    assert (await relay.lag())[0] == 5  # undelivered
    batch = await relay.stream.read(2, None)
    pending, age = await relay.lag()  # 2 delivered but uncommitted + 3 undelivered
    assert pending == 5 and age is not None and age >= 0.25
    await relay.write_batch(batch)
    await relay.ack(batch)
    pending, age = await relay.lag()
    assert pending == 3 and age is not None
    small = AuditRelay(
        redis, namespace, "postgresql://unused", replace(relay_options, lag_scan_limit=2)
    )
    assert (await small.lag())[0] == 3  # exact count, or an estimate that never undercounts
    await drain(relay)
    assert await relay.lag() == (0, None)


async def test_flush_waits_for_commit(
    outbox: Any,
    redis: aioredis.Redis,
    namespace: str,
    database_url: str,
    relay_options: RelayOptions,
) -> None:
    trail = AuditTrail(redis, namespace, database_url, relay_options)
    await trail.open()
    try:
        await trail.flush(timeout=0.5)  # nothing written yet: returns at once
        await outbox.scheduled("f1")
        with pytest.raises(TimeoutError, match="1 outbox events not yet committed"):
            await trail.flush(timeout=0.3)  # no relay runs anywhere
        relay = AuditRelay(redis, namespace, database_url, relay_options)
        await relay.start()
        for i in range(50):
            await outbox.scheduled(f"f{i + 2}")
        await trail.flush(timeout=5)
        # every event XADDed before flush() is readable now
        for i in range(51):
            row = await trail.get(f"f{i + 1}")
            assert row is not None and row.status == "active"
        assert await trail.lag() == (0, None)
        await relay.stop()
    finally:
        await trail.close()


async def test_stop_drains_and_leaves_no_consumer(
    outbox: Any, relay: AuditRelay, redis: aioredis.Redis, db: asyncpg.Connection
) -> None:
    await relay.start()
    for i in range(20):
        await outbox.scheduled(f"s{i}")
    await relay.stop()
    assert await db.fetchval("SELECT count(*) FROM schedule_audit") == 20
    info = await redis.xinfo_groups(outbox.key)
    assert info[0]["pending"] == 0 and info[0]["consumers"] == 0


async def test_stop_ends_a_linger_at_once(
    outbox: Any,
    redis: aioredis.Redis,
    namespace: str,
    database_url: str,
    relay_options: RelayOptions,
) -> None:
    """After a partial batch the relay lingers so the next one is bigger; a stop does not wait
    that out (a worker's close would otherwise take the linger longer)."""
    relay = AuditRelay(redis, namespace, database_url, replace(relay_options, linger_ms=10_000))
    await relay.start()
    await outbox.scheduled("lingered")
    await AuditTrail(redis, namespace, database_url, relay_options).flush(timeout=20)
    await asyncio.sleep(0.2)  # it lingers now: the batch of one was partial
    started = asyncio.get_running_loop().time()
    await relay.stop()
    assert asyncio.get_running_loop().time() - started < 3, "stop waited out the 10 s linger"


async def test_a_running_relay_trims_once_enough_entries_are_acknowledged(
    outbox: Any,
    redis: aioredis.Redis,
    namespace: str,
    database_url: str,
    relay_options: RelayOptions,
) -> None:
    """Under load the outbox is trimmed well before the timer (acknowledged entries still take
    memory)."""
    opts = replace(relay_options, trim_interval_s=3600, trim_after_entries=10, batch_size=5)
    relay = AuditRelay(redis, namespace, database_url, opts)
    await relay.start()  # its timer trims once now, then not for an hour
    try:
        for i in range(30):
            await outbox.scheduled(f"m{i}")
        await AuditTrail(redis, namespace, database_url, opts).flush(timeout=20)

        async def trimmed() -> bool:
            return int(await redis.xlen(outbox.key)) < 10

        await eventually(trimmed, what="fewer than trim_after_entries entries left in the outbox")
    finally:
        await relay.stop()


async def test_two_relays_share_a_busy_stream(
    outbox: Any,
    redis: aioredis.Redis,
    namespace: str,
    database_url: str,
    db: asyncpg.Connection,
    relay_options: RelayOptions,
) -> None:
    """Events of one job split across two relays running at once still converge (row locks per
    job)."""
    opts = replace(relay_options, batch_size=7)
    relays = [AuditRelay(redis, namespace, database_url, opts) for _ in range(2)]
    for r in relays:
        await r.start()
    try:
        for i in range(60):
            outbox.now = 1_800_000_000_000 + i
            await busy_job(outbox, f"b{i}", outbox.now + 1_000)
        trail = AuditTrail(redis, namespace, database_url, opts)
        await trail.flush(timeout=20)
    finally:
        for r in relays:
            await r.stop()
    rows = await db.fetch(
        "SELECT status, attempts, last_error->>'message' AS msg FROM schedule_audit"
    )
    assert len(rows) == 60
    assert {(r["status"], r["attempts"], r["msg"]) for r in rows} == {("cancelled", 2, "second")}
    assert await db.fetchval("SELECT count(*) FROM schedule_events") == len(outbox.ids)
    assert await db.fetchval("SELECT count(*) FROM schedule_attempts") == 120


async def test_a_relay_waiting_out_an_outage_keeps_its_batch(
    outbox: Any, redis: aioredis.Redis, namespace: str, relay_options: RelayOptions
) -> None:
    """While Postgres is unreachable the holder keeps its entries claimed; nothing is acked or
    lost."""
    relay_options = replace(relay_options, drain_timeout_s=0.2)  # nothing can drain: stop soon
    down = AuditRelay(redis, namespace, "postgresql://postgres@127.0.0.1:1/none", relay_options)
    other = AuditRelay(redis, namespace, "postgresql://postgres@127.0.0.1:1/none", relay_options)
    for i in range(3):
        await outbox.scheduled(f"k{i}")
    await down.start()  # starts fine although Postgres cannot be reached
    try:
        await asyncio.sleep(relay_options.claim_idle_ms / 1000 * 3)
        assert await other.stream.claim(relay_options.claim_idle_ms, 10) == []
        summary = await redis.xpending(outbox.key, "audit")
        assert summary["pending"] == 3
        assert [(c["name"].decode(), c["pending"]) for c in summary["consumers"]] == [
            (down.consumer, 3)
        ]
        pending, age = await down.lag()
        assert pending == 3 and age is not None and age >= relay_options.claim_idle_ms / 1000 * 2
    finally:
        await down.stop()
        await other.stop()
    assert (await redis.xpending(outbox.key, "audit"))[
        "pending"
    ] == 3  # still there for the next relay


async def test_malformed_and_deleted_entries_are_skipped_not_retried_forever(
    outbox: Any,
    relay: AuditRelay,
    redis: aioredis.Redis,
    namespace: str,
    database_url: str,
    db: asyncpg.Connection,
    relay_options: RelayOptions,
    drain: Drain,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await outbox.scheduled("good")
    await redis.xadd(outbox.key, {"e": "exploded", "id": "x", "ts": "1", "a": "0"})
    await redis.xadd(outbox.key, {"e": "scheduled", "ts": "1", "a": "0"})  # no job id
    await redis.xadd(outbox.key, {"e": "completed", "id": "x", "ts": "not-a-number", "a": "1"})
    gone = await outbox.completed("good", 1)
    dead = AuditRelay(redis, namespace, database_url, relay_options)
    assert (
        len(await dead.read_batch()) == 5
    )  # ... and dies; then the last entry is deleted from the stream
    await dead.stream.aclose()  # (its connections go with it)
    await redis.xdel(outbox.key, gone)
    await asyncio.sleep(relay_options.claim_idle_ms / 1000 + 0.1)
    assert await drain(relay) == 5
    assert (await redis.xpending(outbox.key, "audit"))["pending"] == 0
    assert await db.fetchval("SELECT count(*) FROM schedule_events") == 1
    assert await db.fetchval("SELECT status FROM schedule_audit WHERE id = 'good'") == "active"
    skipped = [
        r.getMessage() for r in caplog.records if r.name == "horae.audit" and r.levelno == 40
    ]
    assert len(skipped) == 4, skipped


async def test_relays_taking_turns_on_a_job_never_resume_a_stale_fold(
    outbox: Any,
    redis: aioredis.Redis,
    namespace: str,
    database_url: str,
    db: asyncpg.Connection,
    relay_options: RelayOptions,
) -> None:
    """A relay keeps each job's fold between batches; when another relay wrote the job in
    between, its fold is stale and it must fold the job again from every stored event."""
    a, b = (AuditRelay(redis, namespace, database_url, relay_options) for _ in range(2))
    await busy_job(outbox, "turns", outbox.now + 1_000, late_completion=True)
    entries = await all_entries(redis, outbox.key)
    try:
        assert await a.write_batch(entries[:2]) == 2  # scheduled, started(1): a keeps the fold
        assert await b.write_batch(entries[2:4]) == 2  # attempt_failed(1), retry_scheduled: b
        assert await a.write_batch(entries[4:]) == len(entries) - 4  # a's fold lacks b's events
        got = without_versions(await dump(db))
        for table in TABLES:
            await db.execute(f"TRUNCATE {table}")
        assert await AuditRelay(redis, namespace, database_url, relay_options).write_batch(
            entries
        ) == len(entries)
        assert got == without_versions(
            await dump(db)
        )  # same rows as one relay folding everything at once
        assert got["schedule_attempts"][0]["outcome"] == "failed"
    finally:
        await a.stop()
        await b.stop()


async def test_a_relay_resumes_its_own_fold_across_batches(
    outbox: Any, relay: AuditRelay, redis: aioredis.Redis, db: asyncpg.Connection
) -> None:
    await busy_job(outbox, "mine", outbox.now + 1_000)
    entries = await all_entries(redis, outbox.key)
    for entry in entries:  # one event per batch: every batch after the first resumes the kept fold
        assert await relay.write_batch([entry]) == 1
    got = without_versions(await dump(db))
    index = await db.fetchrow("SELECT applied_ms, applied_seq FROM schedule_audit")
    assert (index["applied_ms"], index["applied_seq"]) == parse_id(entries[-1].stream_id)
    assert await folded_at_once(relay, db, entries) == got


async def test_a_resumed_fold_writes_every_column_a_later_event_changed(
    outbox: Any, relay: AuditRelay, redis: aioredis.Redis, db: asyncpg.Connection
) -> None:
    """A kept fold's row is settled with its status columns alone while its other columns stand
    (audit/queries.sql: settle_jobs); a debounce, a reschedule or a retry changes those others,
    and the row must show them: one event per batch ends with the rows of one batch of all."""
    due = outbox.now + 1_000
    await outbox.scheduled("moved", run_at=due, payload={"n": 1})
    outbox.tick()
    await outbox.debounced("moved", due + 500, payload={"n": 2})
    outbox.tick()
    await outbox.rescheduled("moved", 0, due + 9_000, tz="Europe/Paris")
    outbox.now = due + 9_001
    await outbox.started("moved", 1, due=due + 9_000)
    outbox.tick(10)
    await outbox.failed("moved", 1, message="no")
    outbox.tick()
    await outbox.retried("moved", 1)
    outbox.tick()
    await outbox.started("moved", 1, due=outbox.now - 1)
    outbox.tick(10)
    await outbox.completed("moved", 1)
    entries = await all_entries(redis, outbox.key)
    seen = []
    for entry in entries:
        assert await relay.write_batch([entry]) == 1
        seen.append(await db.fetchrow("SELECT status, run_at, tz, payload FROM schedule_audit"))
    # after the debounce, the reschedule, the started attempt: the row as those events left it
    assert [(r["run_at"], r["payload"]) for r in seen[:3]] == [
        (at(due), {"n": 1}),
        (at(due + 500), {"n": 2}),
        (at(due + 9_000), {"n": 2}),
    ]
    assert [(r["status"], r["tz"]) for r in seen[2:4]] == [("active", "Europe/Paris")] * 2
    got = without_versions(await dump(db))
    assert await folded_at_once(relay, db, entries) == got


async def test_a_kept_fold_whose_index_row_went_away_gets_one_again(
    outbox: Any, relay: AuditRelay, redis: aioredis.Redis, db: asyncpg.Connection
) -> None:
    """The relay locks, rather than inserts, the index row of a job whose fold it keeps; when
    that row is gone (the tables emptied under it), the job's next events still land."""
    due = outbox.now + 1_000
    await outbox.scheduled("kept", run_at=due)
    first = await all_entries(redis, outbox.key)
    assert await relay.write_batch(first) == 1
    await empty(db)
    outbox.now = due + 1
    await outbox.started("kept", 1, due=due)
    rest = (await all_entries(redis, outbox.key))[1:]
    assert await relay.write_batch(rest) == 1
    assert await db.fetchval("SELECT count(*) FROM schedule_job_index WHERE job_id = 'kept'") == 1
    assert await db.fetchval("SELECT attempts FROM schedule_audit WHERE id = 'kept'") == 0
    worker = await db.fetchval("SELECT worker_id FROM schedule_attempts WHERE job_id = 'kept'")
    assert worker == "w1"


async def test_an_attempt_row_dropped_in_a_later_batch_is_deleted(
    outbox: Any, relay: AuditRelay, redis: aioredis.Redis, db: asyncpg.Connection
) -> None:
    """The relay writes the running attempt's row, then a later batch says the attempt was
    given back and the job cancelled: the resumed fold has no row, so neither may the table."""
    due = outbox.now + 1_000
    await outbox.scheduled("gone", run_at=due)
    await outbox.started("gone", 1, due)
    first = await all_entries(redis, outbox.key)
    assert await relay.write_batch(first) == 2
    assert await db.fetchval("SELECT count(*) FROM schedule_attempts") == 1
    outbox.tick()
    await outbox.released("gone", 1)
    await outbox.cancelled("gone", 0, running=False)
    rest = (await all_entries(redis, outbox.key))[2:]
    assert await relay.write_batch(rest) == 2
    assert await db.fetchval("SELECT count(*) FROM schedule_attempts") == 0
    assert await db.fetchval("SELECT status FROM schedule_audit WHERE id = 'gone'") == "cancelled"
