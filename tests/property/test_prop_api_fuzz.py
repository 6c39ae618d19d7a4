"""Fuzzing the public scheduling API with hypothesis, on the real Redis: whatever the arguments
of schedule_at, schedule_in, schedule_cron, schedule_many and configure_topic(TopicOptions),
the call returns, or raises a ScheduleError that names the field; never another exception.
A refused call writes nothing: the namespace's keyspace (every key, dumped) is the same
before and after it.

Budget: 150 examples per entry point in CI (derandomized, about 15 s in all);
HYPOTHESIS_PROFILE=long: 1,500 each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from listeners import ListenerRegistry
from scheduler import Scheduler
from scheduler.core.errors import ScheduleError
from scheduler.core.flow import Dedupe, RateLimit
from scheduler.core.topic_options import TopicOptions
from tests.hypothesis_profiles import budget
from tests.integration.engine_fixtures import make_scheduler

FUZZ = settings(
    max_examples=budget(150),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

TEXT = (
    st.text(max_size=40)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=8)
    | st.sampled_from(
        ["", " ", "t", "orders", "a\x00b", "\ud800", "schedule.failed", "x" * 201, "-1", "1e400"]
    )
)
NUMBER = (
    st.integers(-(10**30), 10**30) | st.floats() | st.sampled_from([0, 1, -1, 1e20, 1e30, 2**63])
)
DURATION = (
    NUMBER
    | TEXT
    | st.timedeltas()
    | st.booleans()
    | st.none()
    | st.from_regex(r"\d{1,14}(\.\d{1,3})?(ms|s|m|h|d)", fullmatch=True)
)
JSON_LEAF = st.none() | st.booleans() | NUMBER | TEXT
JSON = st.recursive(
    JSON_LEAF,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(TEXT, c, max_size=4),
    max_leaves=12,
)
ODD = (
    st.builds(object)
    | st.binary(max_size=8)
    | st.sets(st.integers(), max_size=2)
    | st.integers(1, 3000).map(lambda depth: _nested(depth))
)
ANY = JSON | ODD | DURATION
TZ = st.sampled_from(["UTC", "Europe/Berlin", "America/Chicago", "Nope/Zone", "", "utc"]) | TEXT
RETRY = (
    st.none()
    | ANY
    | st.dictionaries(
        st.sampled_from(["attempts", "backoff", "extra"]),
        st.integers(-5, 30)
        | ANY
        | st.dictionaries(
            st.sampled_from(["type", "delay", "max_delay", "jitter", "y"]),
            ANY | st.integers(-10, 10**8),
        ),
    )
)
CRON = st.sampled_from(["* * * * *", "*/5 * * * * *", "0 3 * * *", "@daily", "30 2 * * 1-5"])
BAD_CRON = (
    st.sampled_from(["61 * * * *", "0 0 31 2 *", "H * * * *", "* * * *", "", "0 0 * * 8"]) | TEXT
)
DEDUPE = st.none() | ANY | st.builds(Dedupe, key=st.just("k"), window=st.none() | st.just(60))


class Deep(list):  # type: ignore[type-arg]
    """Lists nested `depth` deep (json.dumps recurses once per level); a short repr, so that
    hypothesis can print an example holding one."""

    def __init__(self, depth: int) -> None:
        value: Any = 1
        for _ in range(depth - 1):
            value = [value]
        super().__init__([value])
        self.depth = depth

    def __repr__(self) -> str:
        return f"Deep({self.depth})"


DEEP: list[Any] = [1]  # lists nested 5,000 deep (plain ones: their repr() recurses)
for _ in range(4_999):
    DEEP = [DEEP]


def _nested(depth: int) -> Any:
    return Deep(depth)


@pytest.fixture
def env(redis_url: str, namespace: str) -> Iterator[tuple[asyncio.Runner, Scheduler]]:
    """A connected Scheduler on the test's namespace, driven through a private event loop."""
    with asyncio.Runner() as runner:
        s = make_scheduler(redis_url, namespace, ListenerRegistry())
        runner.run(s.connect())
        try:
            yield runner, s
        finally:
            runner.run(s.close())


async def _keyspace(s: Scheduler) -> dict[str, bytes]:
    """Every key of the namespace and its DUMP (a refused call must leave all of them alone)."""
    w = s.store.wire
    cursor, keys = "0", []
    while True:
        cursor, batch = await w.call(
            "SCAN", cursor, "MATCH", s.store.keys.prefix + "*", "COUNT", 1000
        )
        keys += batch
        if cursor == "0":
            break
    dumps = await w.call_many([("DUMP", k) for k in keys], raw=[True] * len(keys)) if keys else []
    return dict(zip(keys, dumps))


def check(
    env: tuple[asyncio.Runner, Scheduler],
    call: Callable[[Scheduler], Awaitable[Any]],
    record: Callable[[str], None] = event,
) -> None:
    """`call` returns, or raises a ScheduleError naming a field and writes nothing (`record`
    notes which: hypothesis' event statistics)."""
    runner, s = env
    before = runner.run(_keyspace(s))
    try:
        runner.run(call(s))
    except ScheduleError as exc:
        record(f"refused: {exc.field}")
        assert isinstance(exc.field, str) and exc.field, f"{exc!r} names no field"
        assert runner.run(_keyspace(s)) == before, f"refused ({exc}) but the keyspace changed"
    else:
        record("accepted")


def mostly(valid: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Usually a valid value, else anything: so every field, not just the first checked, gets
    its share of bad input."""
    return st.integers(0, 4).flatmap(
        lambda n: valid if n else bad
    )  # (one_of would flatten `bad`'s branches)


TOPIC = mostly(st.sampled_from(["t", "orders.created"]), TEXT | ANY)
DELAY = mostly(
    st.integers(0, 10**6)
    | st.sampled_from(["5s", "1h30m", "500ms"])
    | st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3650)),
    DURATION | ANY,
)
PAYLOAD = mostly(JSON, ODD)
RETRY_ = mostly(st.none() | st.builds(lambda n: {"attempts": n}, st.integers(1, 20)), RETRY)
META = mostly(
    st.none() | st.dictionaries(st.text(max_size=5), JSON, max_size=3),
    ANY | st.dictionaries(TEXT, JSON),
)
TIMEOUT = mostly(st.none() | st.integers(1, 3600), DURATION | ANY)
JOB_ID = mostly(st.none() | st.text("abcdef0123", min_size=1, max_size=8), TEXT | ANY)
ZONE = mostly(st.sampled_from(["UTC", "Europe/Berlin", "Australia/Lord_Howe"]), TZ | ANY)
KEY = mostly(st.none() | st.sampled_from(["k1", "k2"]), TEXT | ANY)
PRIORITY = mostly(
    st.none() | st.integers(-1000, 1000) | st.sampled_from(["low", "high"]), NUMBER | TEXT | ANY
)
DEAD_LETTER = mostly(st.none() | st.just("dead"), TEXT | ANY)


@FUZZ
@given(
    topic=TOPIC,
    delay=DELAY,
    payload=PAYLOAD,
    retry=RETRY_,
    metadata=META,
    timeout=TIMEOUT,
    job_id=JOB_ID,
    tz=ZONE,
    key=KEY,
    priority=PRIORITY,
    dedupe=mostly(st.none(), DEDUPE),
    dead_letter=DEAD_LETTER,
)
def test_schedule_in_any_input(
    env: Any,
    topic: Any,
    delay: Any,
    payload: Any,
    retry: Any,
    metadata: Any,
    timeout: Any,
    job_id: Any,
    tz: Any,
    key: Any,
    priority: Any,
    dedupe: Any,
    dead_letter: Any,
) -> None:
    check(
        env,
        lambda s: s.schedule_in(
            topic,
            delay,
            payload=payload,
            retry=retry,
            metadata=metadata,
            timeout=timeout,
            job_id=job_id,
            tz=tz,
            key=key,
            priority=priority,
            dedupe=dedupe,
            dead_letter=dead_letter,
        ),
    )


@FUZZ
@given(
    topic=TOPIC,
    run_at=mostly(
        st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30))
        | st.datetimes(timezones=st.timezones()),
        ANY,
    ),
    tz=ZONE,
    payload=PAYLOAD,
    dead_letter=DEAD_LETTER,
    timeout=TIMEOUT,
    retry=RETRY_,
)
def test_schedule_at_any_input(
    env: Any,
    topic: Any,
    run_at: Any,
    tz: Any,
    payload: Any,
    dead_letter: Any,
    timeout: Any,
    retry: Any,
) -> None:
    check(
        env,
        lambda s: s.schedule_at(
            topic,
            run_at,
            tz,
            payload=payload,
            dead_letter=dead_letter,
            timeout=timeout,
            retry=retry,
        ),
    )


@FUZZ
@given(
    name=mostly(st.sampled_from(["nightly", "c:1"]), TEXT | ANY),
    cron=mostly(CRON, BAD_CRON | ANY),
    topic=TOPIC,
    tz=ZONE,
    misfire=mostly(st.sampled_from([None, "coalesce", "skip", "all"]), TEXT | ANY),
    retry=RETRY_,
    timeout=TIMEOUT,
    payload=PAYLOAD,
    metadata=META,
    key=KEY,
    dedupe=mostly(st.none(), DEDUPE),
    priority=PRIORITY,
)
def test_schedule_cron_any_input(
    env: Any,
    name: Any,
    cron: Any,
    topic: Any,
    tz: Any,
    misfire: Any,
    retry: Any,
    timeout: Any,
    payload: Any,
    metadata: Any,
    key: Any,
    dedupe: Any,
    priority: Any,
) -> None:
    check(
        env,
        lambda s: s.schedule_cron(
            name,
            cron,
            topic=topic,
            tz=tz,
            misfire=misfire,
            retry=retry,
            timeout=timeout,
            payload=payload,
            metadata=metadata,
            key=key,
            dedupe=dedupe,
            priority=priority,
        ),
    )


ITEM = mostly(
    st.fixed_dictionaries(
        {"topic": TOPIC},
        optional={
            "delay": DELAY,
            "run_at": st.datetimes(timezones=st.timezones()) | ANY,
            "payload": PAYLOAD,
            "retry": RETRY_,
            "job_id": JOB_ID,
            "timeout": TIMEOUT,
            "tz": ZONE,
            "metadata": META,
            "key": KEY,
            "priority": PRIORITY,
        },
    ),
    ANY | st.dictionaries(TEXT, ANY, max_size=2),
)


@FUZZ
@given(items=mostly(st.lists(ITEM, max_size=4), ANY))
def test_schedule_many_any_input(env: Any, items: Any) -> None:
    check(env, lambda s: s.schedule_many(items))


@FUZZ
@given(
    name=TOPIC,
    policy=mostly(st.sampled_from(["standard", "singleton", "short"]), TEXT | ANY),
    retry=RETRY_,
    timeout=TIMEOUT,
    concurrency=mostly(st.none() | st.integers(1, 100), NUMBER | ANY),
    priority=mostly(st.integers(-1000, 1000), NUMBER | TEXT | ANY),
    warning_size=mostly(st.none() | st.integers(1, 10**6), NUMBER | ANY),
    dead_letter=DEAD_LETTER,
    rate=mostly(
        st.none() | st.tuples(st.integers(1, 100), st.integers(1, 3600), st.booleans()),
        st.tuples(NUMBER, DURATION, ANY) | ANY,
    ),
)
def test_configure_topic_any_input(
    env: Any,
    name: Any,
    policy: Any,
    retry: Any,
    timeout: Any,
    concurrency: Any,
    priority: Any,
    warning_size: Any,
    dead_letter: Any,
    rate: Any,
) -> None:
    async def call(s: Scheduler) -> None:
        limit = (
            RateLimit(*rate) if isinstance(rate, tuple) else rate
        )  # a bad RateLimit is refused here
        await s.configure_topic(
            name,
            TopicOptions(
                policy=policy,
                retry=retry,
                timeout=timeout,
                rate_limit=limit,
                concurrency=concurrency,
                priority_default=priority,
                warning_size=warning_size,
                dead_letter=dead_letter,
            ),
        )

    check(env, call)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.schedule_many(DEEP),
        lambda s: s.schedule_many([DEEP]),
        lambda s: s.schedule_in(DEEP, 1),
        lambda s: s.schedule_in("t", DEEP),
        lambda s: s.schedule_in("t", 1, metadata=DEEP),
        lambda s: s.schedule_in("t", 1, payload=DEEP),
        lambda s: s.schedule_in("t", 1, key=DEEP),
        lambda s: s.schedule_cron(DEEP, "* * * * *", topic="t"),
    ],
    ids=["items", "item", "topic", "delay", "metadata", "payload", "key", "cron name"],
)
def test_a_deeply_nested_value_is_refused_by_name(
    env: Any, call: Callable[[Scheduler], Awaitable[Any]]
) -> None:
    """Found by the fuzz: the error message's repr() of such a value raised RecursionError."""
    check(env, call, lambda what: None)
    with pytest.raises(ScheduleError):
        env[0].run(call(env[1]))


def test_the_fuzz_keyspace_check_can_fail(env: Any) -> None:
    """The keyspace snapshot sees a write (so "writes nothing" is a real check)."""
    runner, s = env
    before = runner.run(_keyspace(s))
    runner.run(s.schedule_in("t", timedelta(seconds=5)))
    assert runner.run(_keyspace(s)) != before
