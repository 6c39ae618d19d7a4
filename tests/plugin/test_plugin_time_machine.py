"""horae_clock: advance and run_until_idle step from due time to due time and settle each
instant fully (delayed jobs, retries after their backoff), listener errors surface, and
horae.scheduled/ran/failed read what happened."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from horae import Backoff, InvalidDelay, Retry, RetryPolicy, ScheduleArrivedEvent, on_event

START = datetime(2030, 1, 1, tzinfo=UTC)  # the fixture's default first instant
CALLS: list[tuple[str, Any, int, datetime]] = []  # (topic, payload, attempt, when it ran)
MACHINE: list[Any] = []
SCHEDULER: list[Any] = []


@pytest.fixture(autouse=True)
def _record(horae: Any, horae_clock: Any) -> None:
    MACHINE[:], SCHEDULER[:] = [horae_clock], [horae]
    CALLS.clear()


def _called(event: ScheduleArrivedEvent) -> None:
    CALLS.append((event.topic, event.payload, event.attempt, MACHINE[0].now()))


@on_event("plugin.tm.delayed")
async def delayed(event: ScheduleArrivedEvent) -> None:
    _called(event)


@on_event("plugin.tm.retry")
def asks_for_retry(event: ScheduleArrivedEvent) -> None:  # a sync listener: run in a thread
    _called(event)
    if event.attempt == 1:
        raise Retry(delay=120)


@on_event("plugin.tm.broken")
async def broken(event: ScheduleArrivedEvent) -> None:
    _called(event)
    raise ValueError(f"broken {event.payload}")


@on_event("plugin.tm.chain")
async def chain(event: ScheduleArrivedEvent) -> None:
    _called(event)
    if event.payload < 3:
        await SCHEDULER[0].schedule_in("plugin.tm.chain", 0, payload=event.payload + 1)


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


async def test_delayed_jobs_run_in_due_order_each_at_its_due_instant(
    horae: Any, horae_clock: Any
) -> None:
    for name, delay in (
        ("c", "3h"),
        ("a", "30s"),
        ("b", "1h"),
        ("later", "26h"),
        ("d", "24h59m59s999ms"),
    ):
        await horae.schedule_in("plugin.tm.delayed", delay, payload=name)

    await horae_clock.advance("25h")

    assert horae_clock.now() == at(25 * 3600)
    assert [(p, when) for _, p, _, when in CALLS] == [
        ("a", at(30)),
        ("b", at(3600)),
        ("c", at(3 * 3600)),
        ("d", at(25 * 3600 - 0.001)),
    ]
    assert [j.payload for j in await horae.ran("plugin.tm.delayed")] == ["a", "b", "c", "d"]
    [waiting] = await horae.scheduled("plugin.tm.delayed")
    assert waiting.payload == "later" and waiting.run_at == at(26 * 3600)
    await horae_clock.advance(3600)
    assert [p for _, p, _, _ in CALLS] == ["a", "b", "c", "d", "later"]
    assert await horae.scheduled() == []


async def test_advance_takes_duration_text_seconds_and_timedelta_and_refuses_bad_ones(
    horae_clock: Any,
) -> None:
    await horae_clock.advance("1h30m")
    await horae_clock.advance(90)
    await horae_clock.advance(0.5)
    await horae_clock.advance(timedelta(minutes=1))
    assert horae_clock.now() == at(5400 + 90 + 0.5 + 60)
    for bad in ("-1s", "1h30", "soon", -5, None):
        with pytest.raises(InvalidDelay, match="delta"):
            await horae_clock.advance(bad)
    with pytest.raises(ValueError, match="aware datetime"):
        await horae_clock.advance_to(datetime(2031, 1, 1))
    with pytest.raises(ValueError, match="before now"):
        await horae_clock.advance_to(START)
    assert horae_clock.now() == at(5400 + 90 + 0.5 + 60)  # nothing moved
    await horae_clock.advance_to(datetime(2030, 1, 2, 1, tzinfo=timezone(timedelta(hours=1))))
    assert horae_clock.now() == datetime(2030, 1, 2, tzinfo=UTC)


async def test_a_retry_runs_after_its_delay_and_retry_is_no_error(
    horae: Any, horae_clock: Any
) -> None:
    job_id = await horae.schedule_in("plugin.tm.retry", "10m", payload={"n": 1})

    await horae_clock.advance("11m")  # the retry is due at 12m: not yet
    [waiting] = await horae.scheduled("plugin.tm.retry")
    assert (
        waiting.id == job_id
        and waiting.state.value == "retrying"
        and waiting.next_attempt_at == at(720)
    )

    await horae_clock.advance("1m")
    assert [(a, when) for _, _, a, when in CALLS] == [(1, at(600)), (2, at(720))]
    [job] = await horae.ran("plugin.tm.retry")
    assert (job.id, job.state.value, job.attempts, job.payload) == (
        job_id,
        "completed",
        2,
        {"n": 1},
    )
    assert [(r.attempt, r.started_at, r.outcome) for r in job.runs] == [
        (1, at(600), "failed"),
        (2, at(720), "succeeded"),
    ]
    assert horae_clock.errors == []


async def test_a_listener_error_surfaces_from_advance_after_the_instant_settled(
    horae: Any, horae_clock: Any
) -> None:
    job_id = await horae.schedule_in("plugin.tm.broken", "1h", payload="x")
    with pytest.raises(ValueError, match="broken x") as raised:
        await horae_clock.advance("1h")
    assert any(job_id in note and "attempt 1" in note for note in raised.value.__notes__)
    [job] = await horae.scheduled("plugin.tm.broken")  # settled before raising: the retry is stored
    assert (job.state.value, job.attempts, job.next_attempt_at) == ("retrying", 1, at(3600 + 30))

    with pytest.raises(ExceptionGroup) as group:  # attempts 2..5 (default policy): +30s, 1m, 2m, 4m
        await horae_clock.advance("10m")
    assert [str(e) for e in group.value.exceptions] == ["broken x"] * 4
    assert horae_clock.now() == at(3600 + 600)  # the whole advance ran before raising
    [job] = await horae.failed("plugin.tm.broken")
    assert [r.started_at for r in job.runs] == [at(3600 + s) for s in (0, 30, 90, 210, 450)]


async def test_several_listener_errors_surface_as_a_group_once(
    horae: Any, horae_clock: Any
) -> None:
    for name in ("p", "q"):
        await horae.schedule_in(
            "plugin.tm.broken",
            "5m",
            payload=name,
            retry=RetryPolicy(attempts=1, backoff=Backoff("fixed", delay_ms=1000)),
        )
    with pytest.raises(ExceptionGroup) as raised:
        await horae_clock.advance("5m")
    assert sorted(str(e) for e in raised.value.exceptions) == ["broken p", "broken q"]
    await horae_clock.advance("1h")  # reported once: nothing new
    assert sorted(j.payload for j in await horae.failed("plugin.tm.broken")) == ["p", "q"]


@pytest.mark.horae(raise_errors=False)
async def test_raise_errors_false_lets_listeners_fail_and_keeps_their_errors(
    horae: Any, horae_clock: Any
) -> None:
    await horae.schedule_in(
        "plugin.tm.broken",
        "1m",
        payload="y",
        retry=RetryPolicy(attempts=3, backoff=Backoff("fixed", delay_ms=60_000)),
    )
    await horae_clock.advance("10m")
    [job] = await horae.failed("plugin.tm.broken")
    assert (
        job.attempts == 3 and job.last_error is not None and job.last_error["message"] == "broken y"
    )
    assert [r.started_at for r in job.runs] == [at(60), at(120), at(180)]
    assert [(e.topic, e.attempt, e.at, str(e.exception)) for e in horae_clock.errors] == [
        ("plugin.tm.broken", n, at(60 * n), "broken y") for n in (1, 2, 3)
    ]
    assert await horae.ran("plugin.tm.broken") == [job]


async def test_run_until_idle_settles_what_is_due_now_and_what_it_schedules_for_now(
    horae: Any, horae_clock: Any
) -> None:
    await horae.schedule_in("plugin.tm.chain", 0, payload=1)
    await horae.schedule_in("plugin.tm.delayed", "1s", payload="not yet")
    await horae_clock.run_until_idle()
    assert [(t, p, when) for t, p, _, when in CALLS] == [
        ("plugin.tm.chain", n, START) for n in (1, 2, 3)
    ]
    assert horae_clock.now() == START
    assert [j.payload for j in await horae.scheduled()] == ["not yet"]
    assert sorted(j.payload for j in await horae.ran()) == [1, 2, 3]  # same run_at: by id


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    delays=st.lists(st.integers(min_value=0, max_value=3 * 86_400_000), min_size=1, max_size=6),
    span=st.integers(min_value=0, max_value=4 * 86_400_000),
)
async def test_advance_runs_exactly_what_falls_due_each_at_its_instant(
    horae: Any, horae_clock: Any, delays: list[int], span: int
) -> None:
    """Every job due by the target ran exactly once, at its due instant, in due order; none
    later."""
    MACHINE[:] = [horae_clock]
    CALLS.clear()
    start = horae_clock.now()
    ids = [
        await horae.schedule_at("plugin.tm.delayed", start + timedelta(milliseconds=ms), payload=ms)
        for ms in delays
    ]
    await horae_clock.advance(span / 1000)
    ran = [(p, when) for _, p, _, when in CALLS]
    expected = sorted((ms, start + timedelta(milliseconds=ms)) for ms in delays if ms <= span)
    assert sorted(ran) == expected
    assert [when for _, when in ran] == sorted(when for _, when in ran)
    await horae.cancel_many(ids)  # later examples share the namespace


@on_event("plugin.tm.parent")
async def parent(event: ScheduleArrivedEvent) -> Any:
    _called(event)
    return event.payload * 10


@on_event("plugin.tm.child")
async def child(event: ScheduleArrivedEvent) -> Any:
    CALLS.append((event.topic, dict(event.parent_results), event.attempt, MACHINE[0].now()))
    return sum(event.parent_results.values())


async def test_dependent_jobs_run_in_order_with_their_parents_results(
    horae: Any, horae_clock: Any
) -> None:
    a = await horae.schedule_in("plugin.tm.parent", "1h", payload=1)
    b = await horae.schedule_in("plugin.tm.parent", "2h", payload=2)
    c = await horae.schedule_in("plugin.tm.child", "30m", after=[a, b])
    last = await horae.schedule_in("plugin.tm.child", 0, after=[c])
    await horae_clock.advance("3h")
    assert CALLS == [
        ("plugin.tm.parent", 1, 1, at(3600)),
        ("plugin.tm.parent", 2, 1, at(7200)),
        ("plugin.tm.child", {a: 10, b: 20}, 1, at(7200)),  # when its last parent completed
        ("plugin.tm.child", {c: 30}, 1, at(7200)),
    ]
    assert (await horae.get_job(last)).result == 30


@on_event("plugin.tm.node")
async def node(event: ScheduleArrivedEvent) -> Any:
    CALLS.append((event.topic, dict(event.children_results), event.attempt, MACHINE[0].now()))
    return sum(event.children_results.values()) + event.payload


async def test_a_flow_runs_level_by_level_in_one_advance(horae: Any, horae_clock: Any) -> None:
    from horae import Flow

    root = await horae.flow(
        Flow(
            "plugin.tm.node",
            payload=100,
            children=[
                Flow("plugin.tm.node", 10, [Flow("plugin.tm.parent", 1, delay="1h")]),
                Flow("plugin.tm.parent", 2, delay="2h"),
            ],
        )
    )
    await horae_clock.advance("3h")
    tree = await horae.get_flow(root)
    mid, leaf = tree.children
    assert CALLS == [
        ("plugin.tm.parent", 1, 1, at(3600)),
        ("plugin.tm.node", {mid.children[0].id: 10}, 1, at(3600)),
        ("plugin.tm.parent", 2, 1, at(7200)),
        ("plugin.tm.node", {mid.id: 20, leaf.id: 20}, 1, at(7200)),
    ]
    assert (await horae.get_job(root)).result == 140
