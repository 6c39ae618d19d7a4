"""Topic configuration on real Redis: configure_topic stores exactly the hash fields the
engine reads, get_topic reads back the normalised options, a policy never changes
(TopicPolicyLocked, nothing written), an invalid value writes nothing, and blocked_keys
reads the engine's set."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
import redis.asyncio as aioredis

from listeners import ListenerRegistry
from scheduler import (
    Backoff,
    InvalidFlowOption,
    RateLimit,
    RetryPolicy,
    RetryPolicyInvalid,
    TopicOptions,
    TopicPolicyLocked,
)
from scheduler.core.keys import Keys
from scheduler.core.topic_options import check_topic_options, topic_fields
from tests.integration.engine_fixtures import make_scheduler
from tests.unit.test_topics import POOLS


async def stored(redis: aioredis.Redis, namespace: str, name: str) -> dict[str, str]:
    raw = await redis.hgetall(Keys(namespace).topic(name))
    return {k.decode(): v.decode() for k, v in raw.items()}


async def test_configure_then_get_round_trips_and_stores_the_engine_fields(
    redis_url: str,
    namespace: str,
    redis: aioredis.Redis,
) -> None:
    rng = random.Random(1414)
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        for i in range(60):
            options = TopicOptions(
                **{f: rng.choice(pool) for f, pool in POOLS.items() if f != "policy"}
            )
            name = f"t{i % 7}"  # the same topics again: each write replaces the last (same policy)
            await s.configure_topic(name, options)
            normal = check_topic_options(name, options, s.default_retry)
            assert await s.get_topic(name) == normal, options
            assert await stored(redis, namespace, name) == topic_fields(normal), (
                "fields not given are removed"
            )
        assert await s.list_topics() == [f"t{i}" for i in range(7)]


async def test_a_retry_mapping_takes_the_configured_defaults(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    retry = {
        "attempts": 9,
        "backoff": "fixed",
        "delay_ms": 2_000,
        "max_delay_ms": 4_000,
        "jitter": "full",
    }
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), retry=retry) as s:
        await s.configure_topic(
            "pay",
            TopicOptions(
                retry={"attempts": 2},
                timeout="90s",
                rate_limit=RateLimit(5, "250ms", per_key=True),
                priority_default="high",
            ),
        )
        got = await s.get_topic("pay")
        assert got == TopicOptions(
            retry=RetryPolicy(2, Backoff("fixed", 2_000, 4_000, "full")),
            timeout=timedelta(seconds=90),
            rate_limit=RateLimit(5, timedelta(milliseconds=250), True),
            priority_default=1,
        )
        assert await stored(redis, namespace, "pay") == {
            "policy": "standard",
            "max": "2",
            "btype": "fixed",
            "bdelay": "2000",
            "bmax": "4000",
            "bjit": "full",
            "timeout": "90000",
            "rl_max": "5",
            "rl_per": "250",
            "rl_key": "1",
            "prio": "1",
        }


async def test_the_policy_is_locked_once_stored(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        await s.configure_topic("orders", TopicOptions(policy="key_strict_fifo", concurrency=2))
        before = await stored(redis, namespace, "orders")
        with pytest.raises(TopicPolicyLocked) as err:
            await s.configure_topic("orders", TopicOptions(policy="singleton", concurrency=5))
        e = err.value
        assert (e.field, e.old, e.new, e.code) == (
            "policy",
            "key_strict_fifo",
            "singleton",
            "TOPIC_POLICY_LOCKED",
        )
        assert "'key_strict_fifo'" in str(e) and "'singleton'" in str(e)
        assert await stored(redis, namespace, "orders") == before, "nothing written"
        with pytest.raises(TopicPolicyLocked):
            await s.configure_topic(
                "orders", TopicOptions(concurrency=5)
            )  # the default policy is a change too
        await s.configure_topic(
            "orders", TopicOptions(policy="key_strict_fifo", concurrency=5, warning_size=10)
        )
        assert await s.get_topic("orders") == TopicOptions(
            policy="key_strict_fifo", concurrency=5, warning_size=10
        )
        assert await s.delete_topic("orders")
        await s.configure_topic("orders", TopicOptions(policy="singleton"))
        assert (await s.get_topic("orders")) == TopicOptions(policy="singleton")


@pytest.mark.parametrize(
    "options, error, field",
    [
        (TopicOptions(policy="fifo"), InvalidFlowOption, "policy"),  # type: ignore[arg-type]
        (TopicOptions(rate_limit="50/1s"), InvalidFlowOption, "rate_limit"),  # type: ignore[arg-type]
        (TopicOptions(timeout="31d"), InvalidFlowOption, "timeout"),
        (TopicOptions(warning_size=0), InvalidFlowOption, "warning_size"),
        (TopicOptions(priority_default=5_000), InvalidFlowOption, "priority_default"),
        (TopicOptions(retry={"attempts": 21}), RetryPolicyInvalid, "attempts"),
    ],
)
async def test_an_invalid_value_writes_nothing(
    redis_url: str,
    namespace: str,
    redis: aioredis.Redis,
    options: TopicOptions,
    error: type[Exception],
    field: str,
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        with pytest.raises(error) as err:
            await s.configure_topic("new", options)
        assert getattr(err.value, "field") == field
        assert await s.get_topic("new") is None and await s.list_topics() == []
        await s.configure_topic("old", TopicOptions(concurrency=3))
        before = await stored(redis, namespace, "old")
        with pytest.raises(error):
            await s.configure_topic("old", options)
        assert await stored(redis, namespace, "old") == before


async def test_blocked_keys_reads_the_engine_set_sorted(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        assert await s.blocked_keys("orders") == []
        await redis.sadd(Keys(namespace).fifo_blocked("orders"), "c-9", "a-1", "b-2")
        await redis.sadd(Keys(namespace).fifo_blocked("other"), "z")
        assert await s.blocked_keys("orders") == ["a-1", "b-2", "c-9"]
