"""Dead letters with listeners, on real Redis: a worker with a listener for a dead-letter
topic runs its dead letters (those held before it started too); their retries wait in the
dead-letter set again, and a worker without such a listener (even one taking every topic)
never runs or completes them."""

from __future__ import annotations

from typing import Any

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState, TopicOptions
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import START_MS, eventually, in_state, make_scheduler

ONCE = {"attempts": 1}


def failing() -> ListenerRegistry:
    """`pay` always fails; `ok` succeeds; nothing listens to `pay.dlq`."""
    reg = ListenerRegistry()

    @reg.on_event("pay")
    async def pay(event: ScheduleArrivedEvent) -> None:
        raise ValueError("card declined")

    @reg.on_event("ok")
    async def ok(event: ScheduleArrivedEvent) -> None:
        return None

    return reg


def dlq_listener(seen: list[Any], fail: bool = False) -> ListenerRegistry:
    """A listener for `pay.dlq` that records each event (and fails, when asked)."""
    reg = ListenerRegistry()

    @reg.on_event("pay.dlq")
    async def handle(event: ScheduleArrivedEvent) -> None:
        seen.append(event)
        if fail:
            raise RuntimeError("still broken")

    return reg


async def held(s: Any) -> list[str]:
    return [d.id for d in (await s.dead_letters("pay.dlq")).items]


async def test_a_listener_on_the_dead_letter_topic_runs_dead_letters_held_before_it_started(
    redis_url: str,
    namespace: str,
) -> None:
    seen: list[Any] = []
    clock = FakeClock(START_MS)
    async with (
        make_scheduler(redis_url, namespace, failing(), clock) as s,
        make_scheduler(redis_url, namespace, dlq_listener(seen), clock) as d,
    ):
        await s.configure_topic("pay", TopicOptions(dead_letter="pay.dlq"))
        first = await s.schedule_in("pay", 0, payload={"n": 1}, retry=ONCE)
        async with s.worker():
            await eventually(lambda: _count(s, 1), what="the first dead letter, held")
        [dl] = await held(s)
        async with d.worker(), s.worker():
            await eventually(
                lambda: in_state(s, dl, JobState.COMPLETED), what="the held dead letter run"
            )
            second = await s.schedule_in("pay", 0, payload={"n": 2}, retry=ONCE)
            await eventually(
                lambda: _ran(seen, 2), what="a new dead letter run while the listener is up"
            )
        assert await held(s) == []
        assert [e.payload for e in seen] == [{"n": 1}, {"n": 2}]
        assert [e.metadata["source_job_id"] for e in seen] == [first, second]
        assert (await s.stats("pay.dlq"))["completed"] == 2


async def test_a_dead_letters_retry_waits_in_its_set_and_no_other_worker_takes_it(
    redis_url: str,
    namespace: str,
) -> None:
    seen: list[Any] = []
    clock = FakeClock(START_MS)
    async with (
        make_scheduler(redis_url, namespace, failing(), clock) as s,
        make_scheduler(redis_url, namespace, dlq_listener(seen, fail=True), clock) as d,
    ):
        await s.configure_topic("pay", TopicOptions(dead_letter="pay.dlq"))
        await s.schedule_in("pay", 0, retry=ONCE)
        async with s.worker(), d.worker():
            await eventually(lambda: _ran(seen, 1), what="the dead letter's first attempt")
            [dl] = await _eventually_held(s)
        info = await s.get_job(dl)
        assert info is not None and info.state is JobState.RETRYING and info.attempts == 1
        # Every topic, no listener for pay.dlq: the retry comes due and stays untouched.
        clock.advance(31)
        async with s.worker(all_topics=True):
            later = await s.schedule_in("ok", 0)
            await eventually(lambda: in_state(s, later, JobState.COMPLETED), what="a later job")
        info = await s.get_job(dl)
        assert info is not None and info.state is JobState.RETRYING and info.attempts == 1
        assert await held(s) == [dl]
        async with d.worker():
            await eventually(lambda: _ran(seen, 2), what="the retry, run by the listener's worker")


async def _count(s: Any, n: int) -> bool:
    return len(await held(s)) == n


async def _ran(seen: list[Any], n: int) -> bool:
    return len(seen) >= n


async def _eventually_held(s: Any) -> list[str]:
    await eventually(lambda: _count(s, 1), what="the retrying dead letter held again")
    return await held(s)
