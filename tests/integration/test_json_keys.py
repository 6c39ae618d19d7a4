"""One rule for payload and metadata keys: JSON object keys are strings, at every level, on every
scheduling path (schedule_at, schedule_many, schedule_cron, a topic with a payload schema): an
int key is refused naming the path (json.dumps turned {1: "a"} into {"1": "a"} silently, so a
listener got another value), and nothing is written. A cron expression has a length cap."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from horae.settings import load_settings
from listeners import ListenerRegistry
from listeners.triggers import MAX_CRON_LEN
from scheduler.api import Scheduler
from scheduler.core.errors import InvalidCron, InvalidPayload

NOW = datetime(2030, 1, 1, tzinfo=UTC)


class Tagged(BaseModel):
    tags: dict[str, str]


@pytest.fixture
async def s(redis_url: str, namespace: str) -> AsyncIterator[Scheduler]:
    reg = ListenerRegistry()

    @reg.on_event("tagged", schema=Tagged)
    async def tagged(event: Any) -> None:
        return None

    settings = load_settings(path=None, env={}, redis_url=redis_url, namespace=namespace)
    settings = settings.model_copy(
        update={"audit": settings.audit.model_copy(update={"relay": False})}
    )
    async with Scheduler(settings=settings, listeners=reg) as scheduler:
        yield scheduler


async def _keys(redis: aioredis.Redis, namespace: str) -> list[bytes]:
    return sorted([k async for k in redis.scan_iter(match="{" + namespace + "}:*")])


# (payload, metadata) -> the message's start
CASES = [
    ({1: "a"}, None, "payload: key 1 is not a string"),
    ({"a": [{"ok": 1}, {2: "b"}]}, None, "payload.a[1]: key 2 is not a string"),
    ([{"x": {None: 1}}], None, "payload[0].x: key None is not a string"),
    (None, {3: "c"}, "metadata: key 3 is not a string"),
    (None, {"m": {"n": {4.5: 1}}}, "metadata.m.n: key 4.5 is not a string"),
]


@pytest.mark.parametrize(("payload", "metadata", "message"), CASES)
async def test_a_key_that_is_not_a_string_is_refused_on_every_path(
    s: Scheduler, redis: aioredis.Redis, namespace: str, payload: Any, metadata: Any, message: str
) -> None:
    before = await _keys(redis, namespace)
    field = "payload" if payload is not None else "metadata"
    calls = {
        "schedule_at": (
            lambda: s.schedule_at("plain", NOW, payload=payload, metadata=metadata),
            field,
        ),
        "schedule_in": (
            lambda: s.schedule_in("plain", 0, payload=payload, metadata=metadata),
            field,
        ),
        "schedule_many": (
            lambda: s.schedule_many(
                [{"topic": "plain"}, {"topic": "plain", "payload": payload, "metadata": metadata}]
            ),
            f"items[1].{field}",
        ),
        "schedule_cron": (
            lambda: s.schedule_cron(
                "c", "0 3 * * *", topic="plain", payload=payload, metadata=metadata
            ),
            field,
        ),
    }
    if payload is not None:  # a topic whose schema would take the coerced keys
        calls["schema"] = (
            lambda: s.schedule_at("tagged", NOW, payload={"tags": payload}),
            "payload",
        )
    for name, (call, want) in calls.items():
        with pytest.raises(InvalidPayload) as caught:
            await call()
        assert caught.value.field == want, (name, caught.value.field)
        text = str(caught.value)
        if name == "schema":
            assert text.startswith(message.replace("payload", "payload.tags", 1)), (name, text)
        else:
            assert message in text, (name, text)
    assert await _keys(redis, namespace) == before, "nothing is written"


async def test_string_keys_are_kept_as_given(s: Scheduler) -> None:
    job_id = await s.schedule_at(
        "plain", NOW, payload={"1": {"a": [{"b": "c"}]}}, metadata={"k": {"v": 1}}
    )
    info = await s.get_job(job_id)
    assert (
        info is not None
        and info.payload == {"1": {"a": [{"b": "c"}]}}
        and info.metadata == {"k": {"v": 1}}
    )
    tagged = await s.schedule_at("tagged", NOW, payload={"tags": {"1": "a"}})
    assert (await s.get_job(tagged)).payload == {"tags": {"1": "a"}}  # type: ignore[union-attr]


async def test_a_cron_expression_over_the_cap_is_refused_and_not_stored(s: Scheduler) -> None:
    minutes = ",".join(["0"] * 200)  # a valid list, 399 characters
    long = f"{minutes} 3 * * *"
    assert len(long) > MAX_CRON_LEN
    with pytest.raises(InvalidCron) as caught:
        await s.schedule_cron("long", long, topic="plain")
    assert caught.value.field == "cron" and f"at most {MAX_CRON_LEN} characters" in str(
        caught.value
    )
    assert await s.get_cron("long") is None
    fits = ",".join(str(m) for m in range(60)) + " 3 * * *"  # every minute listed: 177 characters
    assert len(fits) <= MAX_CRON_LEN
    assert (await s.schedule_cron("fits", fits, topic="plain")).name == "fits"
