"""Dead letters on real Redis and PostgreSQL: a job failing for good on a topic with a
dead-letter topic is copied there in the same script (contract metadata, schedule.failed
still delivered, both in the audit); listing with a cursor, replay, delete, purge,
retention, and no worker ever completing a dead letter."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import SCHEDULE_FAILED_TOPIC, JobState, TopicOptions
from scheduler.core.errors import DeadLetterNotFound, InvalidFlowOption, TopicInUse
from scheduler.core.job import JobInfo
from scheduler.observe.metrics import Metrics
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import (
    START_MS,
    audited_scheduler,
    eventually,
    in_state,
    make_scheduler,
)

ONCE = {"attempts": 1}


def registry(message: str = "boom") -> tuple[ListenerRegistry, dict[str, list[Any]]]:
    """`pay` always fails with ValueError(message); `ok` records payloads; schedule.failed is
    recorded."""
    reg, seen = ListenerRegistry(), {"failed": [], "ok": []}

    @reg.on_event("pay")
    async def pay(event: ScheduleArrivedEvent) -> None:
        raise ValueError(message)

    @reg.on_event("ok")
    async def ok(event: ScheduleArrivedEvent) -> None:
        seen["ok"].append(event.payload)

    @reg.on_event(SCHEDULE_FAILED_TOPIC)
    async def failed(event: Any) -> None:
        seen["failed"].append(event)

    return reg, seen


async def dead_letters(s: Any, topic: str) -> list[JobInfo]:
    return list((await s.dead_letters(topic)).items)


async def has_dead_letters(s: Any, topic: str, n: int) -> bool:
    return len(await dead_letters(s, topic)) == n


async def test_a_job_failing_for_good_becomes_a_dead_letter_with_the_contract_metadata(
    redis_url: str,
    database_url: str,
    namespace: str,
    db: asyncpg.Connection,
) -> None:
    reg, seen = registry("x" * 1_000)
    async with audited_scheduler(redis_url, database_url, namespace, reg, FakeClock(START_MS)) as s:
        await s.configure_topic("pay", TopicOptions(dead_letter="pay.dlq"))
        assert await s.get_topic("pay") == TopicOptions(dead_letter="pay.dlq")
        assert await s.list_topics() == ["pay"]
        job_id = await s.schedule_in("pay", 0, payload={"amount": 3}, retry=ONCE)
        async with s.worker():
            await eventually(lambda: has_dead_letters(s, "pay.dlq", 1), what="the dead letter")
            await eventually(
                lambda: _true(len(seen["failed"]) == 1), what="schedule.failed delivered"
            )
        [dl] = await dead_letters(s, "pay.dlq")
        assert (dl.topic, dl.state, dl.payload) == ("pay.dlq", JobState.SCHEDULED, {"amount": 3})
        m = dl.metadata
        assert (m["source_topic"], m["source_job_id"], m["error_type"], m["attempts"]) == (
            "pay",
            job_id,
            "ValueError",
            1,
        )
        assert m["error"] == "x" * 256
        failed_at = datetime.fromisoformat(m["failed_at"])
        assert failed_at == datetime.fromtimestamp(START_MS / 1000, UTC)
        source = await s.get_job(job_id)
        assert source is not None and source.state is JobState.FAILED
        counted = await s.stats(
            "pay.dlq"
        )  # a waiting dead letter is counted apart, not as scheduled
        assert (counted["dead_letter"], counted["scheduled"]) == (1, 0), counted
        assert (await s.stats())["dead_letter"] == 1 and (await s.stats_by_topic())["pay.dlq"][
            "dead_letter"
        ] == 1
        await s.start_relay()
        await s.audit.flush(timeout=10)
        src_row, dl_row = await s.audit.get(job_id), await s.audit.get(dl.id)
        kinds = [
            r["event_type"]
            for r in await db.fetch(
                "SELECT event_type FROM schedule_events WHERE "
                "job_id = $1 ORDER BY stream_ms, stream_seq",
                job_id,
            )
        ]
    assert src_row is not None and src_row.status == "failed"
    assert dl_row is not None and dl_row.status == "active"
    assert "schedule.failed" in kinds


async def _true(value: bool) -> bool:
    return value


async def test_a_jobs_own_dead_letter_wins_and_no_topic_means_none(
    redis_url: str, namespace: str
) -> None:
    reg, _ = registry()
    async with make_scheduler(redis_url, namespace, reg) as s:
        await s.configure_topic("pay", TopicOptions(dead_letter="pay.dlq"))
        own = await s.schedule_in("pay", 0, retry=ONCE, dead_letter="own.dlq")
        plain = await s.schedule_in("ok", 0, retry=ONCE)
        async with s.worker():
            await eventually(
                lambda: has_dead_letters(s, "own.dlq", 1), what="the job's own dead letter"
            )
            await eventually(lambda: in_state(s, plain, JobState.COMPLETED), what="the ok job")
        assert await dead_letters(s, "pay.dlq") == []
        assert (await dead_letters(s, "own.dlq"))[0].metadata["source_job_id"] == own


async def test_topic_options_refuse_an_invalid_value_and_store_nothing(
    redis_url: str, namespace: str
) -> None:
    reg, _ = registry()
    async with make_scheduler(redis_url, namespace, reg) as s:
        with pytest.raises(InvalidFlowOption, match="concurrency") as err:
            await s.configure_topic("pay", TopicOptions(concurrency=0, dead_letter="pay.dlq"))
        assert err.value.field == "concurrency"
        assert await s.get_topic("pay") is None and await s.list_topics() == []
        await s.configure_topic("pay", TopicOptions(dead_letter="pay.dlq"))
        await s.schedule_in("pay", "1h")
        with pytest.raises(TopicInUse):
            await s.delete_topic("pay")
        assert await s.delete_topic("pay", force=True)
        assert await s.get_topic("pay") is None


async def test_pagination_lists_each_dead_letter_once(redis_url: str, namespace: str) -> None:
    reg, _ = registry()
    async with make_scheduler(redis_url, namespace, reg) as s:
        await s.configure_topic("pay", TopicOptions(dead_letter="pay.dlq"))
        ids = {await s.schedule_in("pay", 0, retry=ONCE) for _ in range(250)}
        async with s.worker(concurrency=50):
            await eventually(
                lambda: _count(s, "pay", "failed", 250), timeout=30, what="250 failures"
            )
        seen, cursor, pages = [], None, 0
        while True:
            page = await s.dead_letters("pay.dlq", limit=100, cursor=cursor)
            pages += 1
            seen += [dl.metadata["source_job_id"] for dl in page.items]
            cursor = page.cursor
            if cursor is None:
                break
        assert pages == 3 and len(seen) == 250 and set(seen) == ids


async def _count(s: Any, topic: str, state: str, n: int) -> bool:
    return (await s.stats(topic))[state] == n


async def test_replay_runs_the_payload_again_on_its_source_topic_and_removes_the_dead_letter(
    redis_url: str,
    database_url: str,
    namespace: str,
    db: asyncpg.Connection,
) -> None:
    reg, seen = registry()
    clock = FakeClock(START_MS)
    async with audited_scheduler(redis_url, database_url, namespace, reg, clock) as s:
        await s.configure_topic("pay", TopicOptions(dead_letter="pay.dlq"))
        job_id = await s.schedule_in("pay", 0, payload={"n": 1}, retry=ONCE)
        async with s.worker():
            await eventually(lambda: has_dead_letters(s, "pay.dlq", 1), what="the dead letter")
        [dl] = await dead_letters(s, "pay.dlq")
        new_id = await s.replay(dl.id, actor="alice")
        assert new_id not in (job_id, dl.id)
        assert await s.get_job(dl.id) is None and await dead_letters(s, "pay.dlq") == []
        new = await s.get_job(new_id)
        assert new is not None and (new.topic, new.payload) == ("pay", {"n": 1})
        assert new.metadata == {"replayed_from": dl.id, "source_job_id": job_id}
        with pytest.raises(DeadLetterNotFound):
            await s.replay(dl.id)
        async with s.worker():  # the replay has the default retry policy: its first attempt fails
            await eventually(
                lambda: in_state(s, new_id, JobState.RETRYING, attempts=1), what="the replay ran"
            )
        await s.start_relay()
        await s.audit.flush(timeout=10)
        rows = await db.fetch(
            "SELECT event_type, fields FROM schedule_events WHERE job_id = $1"
            " ORDER BY stream_ms, stream_seq",
            dl.id,
        )
        new_row = await s.audit.get(new_id)
    deleted = [r["fields"] for r in rows if r["event_type"] == "deleted"]
    assert (
        len(deleted) == 1 and deleted[0]["actor"] == "alice" and deleted[0]["replayed_as"] == new_id
    )
    assert new_row is not None and new_row.status == "active" and new_row.attempts == 1


async def test_replay_onto_a_working_topic_completes(
    redis_url: str, namespace: str, redis: Any
) -> None:
    reg, seen = registry()
    async with make_scheduler(redis_url, namespace, reg) as s:
        await s.configure_topic("pay", TopicOptions(dead_letter="pay.dlq"))
        await s.schedule_in("pay", 0, payload={"n": 2}, retry=ONCE)
        async with s.worker():
            await eventually(lambda: has_dead_letters(s, "pay.dlq", 1), what="the dead letter")
        [dl] = await dead_letters(s, "pay.dlq")
        # The source topic is in the dead letter's metadata: point it at `ok` to see a replay run.
        meta = dict(dl.metadata, source_topic="ok")
        import json

        from scheduler.core.keys import Keys

        await redis.hset(Keys(namespace).job(dl.id), "meta", json.dumps(meta))
        new_id = await s.replay(dl.id)
        async with s.worker():
            await eventually(
                lambda: in_state(s, new_id, JobState.COMPLETED), what="the replayed job completed"
            )
        assert seen["ok"] == [{"n": 2}]


async def test_delete_and_purge_remove_dead_letters(redis_url: str, namespace: str) -> None:
    reg, _ = registry()
    async with make_scheduler(redis_url, namespace, reg) as s:
        await s.configure_topic("pay", TopicOptions(dead_letter="pay.dlq"))
        for _ in range(4):
            await s.schedule_in("pay", 0, retry=ONCE)
        async with s.worker():
            await eventually(lambda: has_dead_letters(s, "pay.dlq", 4), what="4 dead letters")
        first, second, *_ = await dead_letters(s, "pay.dlq")
        assert not await s.reschedule(second.id, datetime.now(UTC)), "held: never made due"
        assert await s.cancel(second.id)
        assert second.id not in [d.id for d in await dead_letters(s, "pay.dlq")], (
            "cancelled: no longer held"
        )
        assert not await s.retry(first.id), "a held dead letter is waiting: nothing to retry"
        assert await s.retry(second.id)
        assert second.id in [d.id for d in await dead_letters(s, "pay.dlq")], "retried: held again"
        assert await s.delete(first.id)
        assert await s.get_job(first.id) is None and len(await dead_letters(s, "pay.dlq")) == 3
        assert await s.purge_dead_letters("pay.dlq") == 3, "the retried one too"
        assert (
            await dead_letters(s, "pay.dlq") == [] and (await s.stats("pay.dlq"))["scheduled"] == 0
        )


async def test_retention_cap_drops_the_oldest_and_counts(redis_url: str, namespace: str) -> None:
    reg, _ = registry()
    clock, reader = FakeClock(START_MS), InMemoryMetricReader()
    s = make_scheduler(
        redis_url, namespace, reg, clock, retention={"dead_letter_max": 5, "failed_age_s": 10**9}
    )
    s.metrics = Metrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    async with s:
        await s.configure_topic("pay", TopicOptions(dead_letter="pay.dlq"))
        order = []
        async with s.worker():
            for i in range(8):
                order.append(await s.schedule_in("pay", 0, retry=ONCE))
                await eventually(
                    lambda: has_dead_letters(s, "pay.dlq", i + 1), what=f"dead letter {i}"
                )
                clock.advance(1)
            w = s.make_worker()
            assert await w.prune() == 3
        kept = [dl.metadata["source_job_id"] for dl in await dead_letters(s, "pay.dlq")]
        assert kept == order[3:]
        assert dropped(reader) == {(("topic", "pay.dlq"),): 3}
        clock.advance(31 * 86_400)
        assert await s.make_worker().prune() == 5
        assert await dead_letters(s, "pay.dlq") == []
        assert dropped(reader) == {(("topic", "pay.dlq"),): 8}


def dropped(reader: InMemoryMetricReader) -> dict[Any, int]:
    return {
        tuple(sorted(p.attributes.items())): p.value
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        for p in m.data.data_points
        if m.name == "horae_dead_letters_dropped_total"
    }


async def test_a_worker_without_a_listener_for_the_dead_letter_topic_does_not_complete_it(
    redis_url: str,
    namespace: str,
) -> None:
    reg, _ = registry()
    async with make_scheduler(redis_url, namespace, reg) as s:
        await s.configure_topic("pay", TopicOptions(dead_letter="pay.dlq"))
        await s.schedule_in("pay", 0, retry=ONCE)
        async with s.worker():
            await eventually(lambda: has_dead_letters(s, "pay.dlq", 1), what="the dead letter")
            # A later job completing proves the worker claimed past the dead letter's time.
            later = await s.schedule_in("ok", 0)
            await eventually(lambda: in_state(s, later, JobState.COMPLETED), what="a later job")
        [dl] = await dead_letters(s, "pay.dlq")
        assert dl.state is JobState.SCHEDULED and dl.attempts == 0
        assert (await s.stats("pay.dlq"))["completed"] == 0


async def test_a_worker_lost_on_the_last_attempt_leaves_a_dead_letter(
    redis_url: str, namespace: str
) -> None:
    reg, _ = registry()
    clock = FakeClock(START_MS)
    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        await s.configure_topic("pay", TopicOptions(dead_letter="pay.dlq"))
        job_id = await s.schedule_in("pay", 0, payload=[1], retry=ONCE)
        jobs, _, _ = await s.store.claim(
            clock.now_ms(), 10, 1_000, "gone"
        )  # a worker that then dies
        assert [j.id for j in jobs] == [job_id]
        clock.advance(5)
        assert await s.make_worker().recover_expired() == 1
        [dl] = await dead_letters(s, "pay.dlq")
        assert (dl.payload, dl.metadata["source_job_id"], dl.metadata["error_type"]) == (
            [1],
            job_id,
            "WorkerLost",
        )
