"""Flow control on real Redis, one process: dedupe (throttle, until finished, debounce),
enqueue-time policies (short, exclusive, stately), priorities, topic defaults, and the
claim-time limits (concurrency, singleton, key_strict_fifo, rate limit) driven through
claim.lua directly, so each rule is seen call by call."""

from __future__ import annotations

from typing import Any

import pytest

from listeners import ListenerRegistry
from scheduler import Dedupe, JobState, KeyRequired, RateLimit, RetryPolicy, TopicOptions
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import START_MS, make_scheduler


def sched(redis_url: str, namespace: str) -> Any:
    return make_scheduler(redis_url, namespace, ListenerRegistry(), FakeClock(START_MS))


async def claim_ids(s: Any, limit: int = 10, worker: str = "w") -> list[str]:
    jobs, _, _ = await s.store.claim(s.clock.now_ms(), limit, 30_000, worker)
    return [j.id for j in jobs]


async def test_dedupe_throttle_keeps_the_first_within_its_window(
    redis_url: str, namespace: str
) -> None:
    async with sched(redis_url, namespace) as s:
        first = await s.schedule("t", _now(s), payload=1, dedupe=Dedupe("welcome-1", window="5m"))
        again = await s.schedule("t", _now(s), payload=2, dedupe=Dedupe("welcome-1", window="5m"))
        assert first.created and (again.job_id, again.created, again.reason) == (
            first.job_id,
            False,
            "throttle",
        )
        info = await s.get_job(first.job_id)
        assert info is not None and info.payload == 1 and info.deduplicated == 1
        assert (await s.stats("t"))["scheduled"] == 1


async def test_dedupe_without_window_lasts_until_the_job_finishes(
    redis_url: str, namespace: str
) -> None:
    async with sched(redis_url, namespace) as s:
        first = await s.schedule_in("t", 0, dedupe=Dedupe("k"))
        assert await s.schedule_in("t", 0, dedupe=Dedupe("k")) == first
        assert await s.cancel(first)
        second = await s.schedule_in("t", 0, dedupe=Dedupe("k"))
        assert second != first, "a finished job frees its dedupe key"


async def test_debounce_moves_the_waiting_job_and_never_a_running_one(
    redis_url: str, namespace: str
) -> None:
    async with sched(redis_url, namespace) as s:
        d = Dedupe("search", window="30s", mode="debounce")
        first = await s.schedule_in("t", 10, payload="a", dedupe=d)
        moved = await s.schedule("t", _later(s, 20), payload="b", dedupe=d)
        assert (moved.job_id, moved.created, moved.reason) == (first, False, "debounce")
        info = await s.get_job(first)
        assert info is not None and info.payload == "b" and info.run_at == _later(s, 20)
        s.clock.advance(20)
        assert await claim_ids(s) == [first]
        third = await s.schedule_in("t", 0, payload="c", dedupe=d)
        assert third != first, "the holder runs: a new job is created"


def _later(s: Any, seconds: int) -> Any:
    from scheduler.core.timeutil import ms_to_utc

    return ms_to_utc(START_MS + seconds * 1000)


@pytest.mark.parametrize(
    ("policy", "refused_while"),
    [
        ("short", ["scheduled"]),
        ("exclusive", ["scheduled", "running"]),
        ("stately", ["scheduled"]),
    ],
)
async def test_enqueue_policies_refuse_and_name_the_holder(
    redis_url: str, namespace: str, policy: str, refused_while: list[str]
) -> None:
    async with sched(redis_url, namespace) as s:
        await s.configure_topic("p", TopicOptions(policy=policy))
        first = await s.schedule("p", _now(s), key="inv-1")
        other_key = await s.schedule("p", _now(s), key="inv-2")
        refused = await s.schedule("p", _now(s), key="inv-1")
        assert first.created and other_key.created
        assert (refused.job_id, refused.created, refused.reason) == (first.job_id, False, policy)
        assert sorted(await claim_ids(s)) == sorted([first.job_id, other_key.job_id])
        while_running = await s.schedule("p", _now(s), key="inv-1")
        assert while_running.created is ("running" not in refused_while)


async def test_singleton_runs_one_per_key_at_a_time(redis_url: str, namespace: str) -> None:
    async with sched(redis_url, namespace) as s:
        await s.configure_topic("p", TopicOptions(policy="singleton"))
        a1, a2, b1 = [await _next(s, "p", key=k) for k in ("a", "a", "b")]
        assert sorted(await claim_ids(s)) == sorted([a1, b1])
        assert await claim_ids(s) == [], "a2 waits while a1 runs"
        await _complete(s, a1)
        assert await claim_ids(s) == [a2]


async def test_key_strict_fifo_runs_a_keys_jobs_in_order_and_blocks_on_failure(
    redis_url: str, namespace: str
) -> None:
    async with sched(redis_url, namespace) as s:
        await s.configure_topic(
            "o", TopicOptions(policy="key_strict_fifo", retry=RetryPolicy(attempts=1))
        )
        with pytest.raises(KeyRequired):
            await s.schedule_in("o", 0)
        o1 = await s.schedule_in("o", 5, key="order-42")  # created first, due later
        o2 = await s.schedule_in("o", 0, key="order-42")
        assert await claim_ids(s) == [], "o2 waits for o1, the older job of its key"
        s.clock.advance(5)
        assert await claim_ids(s) == [o1]
        await _fail(s, o1)
        assert await s.blocked_keys("o") == ["order-42"]
        s.clock.advance(2)
        assert await claim_ids(s) == [], "blocked by the failed job"
        assert await s.delete(o1)
        assert await s.blocked_keys("o") == []
        assert await claim_ids(s) == [o2]


async def test_topic_concurrency_caps_running_attempts(redis_url: str, namespace: str) -> None:
    async with sched(redis_url, namespace) as s:
        await s.configure_topic("c", TopicOptions(concurrency=2))
        ids = [await _next(s, "c") for _ in range(5)]
        first = await claim_ids(s)
        assert first == ids[:2]
        assert await claim_ids(s) == []
        await _complete(s, first[0])
        assert await claim_ids(s) == [ids[2]]


async def test_rate_limit_spaces_starts(redis_url: str, namespace: str) -> None:
    async with sched(redis_url, namespace) as s:
        await s.configure_topic("r", TopicOptions(rate_limit=RateLimit(max=40, per="1s")))
        ids = [await _next(s, "r") for _ in range(10)]
        got = await claim_ids(s)
        assert got == ids[:2], "a burst of max/20 = 2, then one start per 25 ms"
        jobs, next_due, _ = await s.store.claim(s.clock.now_ms(), 10, 30_000, "w")
        assert jobs == [] and next_due == s.clock.now_ms() + 25
        s.clock.advance(0.025)
        assert await claim_ids(s) == [ids[2]]


async def test_priority_claims_higher_first_then_by_due_time(
    redis_url: str, namespace: str
) -> None:
    async with sched(redis_url, namespace) as s:
        low = await _next(s, "t", priority="low")
        normal = await _next(s, "t")
        high2 = await _next(s, "t", priority=5)
        high1 = await _next(s, "t", priority="high")
        assert await claim_ids(s) == [high2, high1, normal, low]
        info = await s.get_job(high2)
        assert info is not None and info.priority == 5


async def test_topic_defaults_apply_unless_the_job_gives_its_own(
    redis_url: str, namespace: str
) -> None:
    async with sched(redis_url, namespace) as s:
        await s.configure_topic(
            "d", TopicOptions(retry=RetryPolicy(attempts=2), timeout="2m", priority_default=3)
        )
        plain = await s.get_job(await s.schedule_in("d", 0))
        own = await s.get_job(
            await s.schedule_in("d", 0, retry={"attempts": 4}, timeout=5, priority=0)
        )
        assert plain is not None and (plain.max_attempts, plain.timeout_ms, plain.priority) == (
            2,
            120_000,
            3,
        )
        assert own is not None and (own.max_attempts, own.timeout_ms, own.priority) == (4, 5_000, 0)


async def _complete(s: Any, job_id: str) -> None:
    from scheduler.core.job import Settlement

    info = await s.get_job(job_id)
    assert info is not None and info.state is JobState.RUNNING
    token = await s.store.wire.call("HGET", s.store.keys.job(job_id), "token")
    assert await s.store.complete(
        [Settlement(job_id, str(token), "succeeded")], s.clock.now_ms(), 1000
    ) == [1]


async def _fail(s: Any, job_id: str) -> None:
    from scheduler.core.job import Settlement
    from scheduler.core.outbox import error_record

    token = await s.store.wire.call("HGET", s.store.keys.job(job_id), "token")
    err = error_record("ValueError", "boom")
    assert await s.store.fail(
        [Settlement(job_id, str(token), "failed", err)], s.clock.now_ms()
    ) == [4]


def _now(s: Any) -> Any:
    from scheduler.core.timeutil import ms_to_utc

    return ms_to_utc(s.clock.now_ms())


async def _next(s: Any, topic: str, **kw: Any) -> str:
    """Schedule for now, then move the clock 1 ms: due times differ, so claim order is creation
    order (a sorted set orders equal scores by member, the random id)."""
    job_id = await s.schedule_in(topic, 0, **kw)
    s.clock.advance(0.001)
    return str(job_id)


@pytest.mark.parametrize(
    ("policy", "second_tick_created"), [("singleton", True), ("exclusive", False)]
)
async def test_cron_ticks_obey_the_topic_policy(
    redis_url: str, namespace: str, policy: str, second_tick_created: bool
) -> None:
    from scheduler.worker.ticker import fire_due_crons

    async with sched(redis_url, namespace) as s:
        await s.configure_topic("nightly", TopicOptions(policy=policy))
        await s.schedule_cron("every-second", "* * * * * *", topic="nightly", misfire="all")
        s.clock.advance(1)
        assert await fire_due_crons(s.store, s.clock, s.settings.cron, s.tracer) == 1
        [first] = await claim_ids(s)
        s.clock.advance(1)
        assert await fire_due_crons(s.store, s.clock, s.settings.cron, s.tracer) == int(
            second_tick_created
        )
        assert await claim_ids(s) == [], "the previous run is still going: no overlapping tick"
        await _complete(s, first)
        assert len(await claim_ids(s)) == int(second_tick_created)
        info = await s.get_job(first)
        assert info is not None and info.key == "every-second", (
            "a tick's key is its schedule's name"
        )


async def test_the_audit_counts_what_was_folded_into_a_job(
    redis_url: str, database_url: str, namespace: str
) -> None:
    from tests.integration.engine_fixtures import audited_scheduler

    async with audited_scheduler(
        redis_url, database_url, namespace, ListenerRegistry(), FakeClock(START_MS)
    ) as s:
        d = Dedupe("search", window="30s", mode="debounce")
        first = await s.schedule_in("t", 10, payload="a", dedupe=d)
        await s.schedule_in("t", 20, payload="b", dedupe=d)
        await s.schedule_in("t", 0, payload="x", dedupe=Dedupe("once"))
        await s.schedule_in("t", 0, payload="y", dedupe=Dedupe("once"))
        await s.start_relay()
        await s.audit.flush()
        record = await s.audit.get(first)
        assert record is not None and record.deduplicated == 1 and record.payload == "b"
        events = [kind for _, kind, *_ in await s.audit.events(first)]
        assert events == ["scheduled", "debounced"]


async def test_listing_waiting_jobs_covers_every_priority_and_parked_job(
    redis_url: str, namespace: str
) -> None:
    async with sched(redis_url, namespace) as s:
        await s.configure_topic("c", TopicOptions(concurrency=1))
        ids = {await _next(s, "t", priority=p) for p in (-1, 0, 0, 4)}
        ids |= {await _next(s, "c") for _ in range(3)}
        assert len(await claim_ids(s, limit=1)) == 1  # a job of priority 4 runs
        jobs, _, _ = await s.store.claim(
            s.clock.now_ms(), 10, 30_000, "w", ["c"]
        )  # one runs, two are parked
        assert len(jobs) == 1
        assert await s.store.wire.call("ZCARD", f"{s.store.keys.prefix}pk:c") == 2
        seen, cursor = [], None
        while True:
            page = await s.jobs(state="scheduled", limit=2, cursor=cursor)
            seen += [j.id for j in page.items]
            if page.cursor is None:
                break
            cursor = page.cursor
        running = {j.id for j in (await s.jobs(state="running")).items}
        assert len(seen) == len(set(seen)) == 5 and set(seen) | running == ids


async def test_key_strict_fifo_head_runs_when_later_jobs_of_its_key_are_due_first(
    redis_url: str, namespace: str
) -> None:
    """A key's next job must run once the one before it finished, even when more of the
    key's later jobs than a claim's limit are due before it (they used to be parked and
    returned `limit` at a time, earliest due first, so the head was never looked at again)."""
    async with sched(redis_url, namespace) as s:
        await s.configure_topic("o", TopicOptions(policy="key_strict_fifo"))
        o1 = await s.schedule_in("o", 0, key="k")
        o2 = await s.schedule_in("o", 3, key="k")  # the head once o1 finished, due last
        later = [await s.schedule_in("o", 1 + i / 10, key="k") for i in range(3)]
        s.clock.advance(3)
        assert await claim_ids(s, limit=1) == [o1]
        assert await claim_ids(s, limit=1) == []
        await _complete(s, o1)
        for _ in range(3):
            got = await claim_ids(s, limit=1)
            if got:
                break
            s.clock.advance(1)
        assert got == [o2]
        await _complete(s, o2)
        for expected in later:
            assert await claim_ids(s, limit=1) == [expected]
            await _complete(s, expected)


async def test_a_cron_dedupe_keeps_a_tick_out_while_the_last_one_is_unfinished(
    redis_url: str, namespace: str
) -> None:
    from scheduler import ScheduleError
    from scheduler.worker.ticker import fire_due_crons

    async with sched(redis_url, namespace) as s:
        with pytest.raises(ScheduleError) as info:
            await s.schedule_cron(
                "x", "* * * * * *", topic="t", dedupe=Dedupe("k", window="1s", mode="debounce")
            )
        assert info.value.field == "dedupe.mode" and await s.list_crons() == []
        await s.schedule_cron(
            "sync", "* * * * * *", topic="t", misfire="all", dedupe=Dedupe("sync-lock")
        )
        s.clock.advance(1)
        assert await fire_due_crons(s.store, s.clock, s.settings.cron, s.tracer) == 1
        s.clock.advance(1)
        assert await fire_due_crons(s.store, s.clock, s.settings.cron, s.tracer) == 0, (
            "the first still waits"
        )
        [first] = await claim_ids(s)
        await _complete(s, first)
        s.clock.advance(1)
        assert await fire_due_crons(s.store, s.clock, s.settings.cron, s.tracer) == 1
        info2 = await s.get_job(first)
        assert info2 is not None and info2.deduplicated == 1


async def test_warning_size_logs_and_counts_a_backlog(
    redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from scheduler.observe.metrics import Metrics

    reader = InMemoryMetricReader()
    async with sched(redis_url, namespace) as s:
        s.metrics = Metrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
        await s.configure_topic("w", TopicOptions(warning_size=2))
        for _ in range(4):
            await s.schedule_in("w", 60)
        await s.schedule_in("quiet", 60)
    warned = [r for r in caplog.records if getattr(r, "event", "") == "topic_warning_size"]
    assert len(warned) == 1 and warned[0].__dict__["topic"] == "w", "once a minute per topic"
    points = {
        tuple(sorted(p.attributes.items())): p.value
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        for p in m.data.data_points
        if m.name == "horae_topic_warning_size_exceeded_total"
    }
    assert points == {(("topic", "w"),): 2}, "the 3rd and 4th jobs found more than 2 waiting"
