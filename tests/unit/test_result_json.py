"""A job's result without Redis: what dispatch collects from its listeners (None: nothing), the
JSON kept (one listener's value, or a mapping by listener name), and the attempt failure of a
result over [limits] result_bytes or not JSON, naming the listener, retried like any failure."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from listeners import DispatchResult, dispatch, qualified_name
from scheduler.core.errors import ResultNotSerializable, ResultTooLarge
from scheduler.core.results import MAX_RESULT_BYTES, result_json
from scheduler.worker.attempt import run_attempt, settlement
from tests.unit.test_attempt import JOB, NOW, clock


async def returns_dict(event: Any) -> Any:
    return {"rows": 3}


def returns_list(event: Any) -> Any:  # sync: runs in a thread
    return [1, "é"]


async def returns_none(event: Any) -> None:
    return None


async def test_dispatch_collects_what_listeners_return_in_registration_order() -> None:
    one = await dispatch([returns_dict], None, 5)
    assert one == DispatchResult(
        listeners=1, results=((qualified_name(returns_dict), {"rows": 3}),)
    )
    several = await dispatch([returns_list, returns_none, returns_dict], None, 5)
    assert several.ok and several.results == (
        (qualified_name(returns_list), [1, "é"]),
        (qualified_name(returns_dict), {"rows": 3}),
    )
    assert (await dispatch([returns_none], None, 5)).results == ()


def test_one_listener_keeps_its_value_several_a_mapping_none_nothing() -> None:
    assert result_json([], several=False) == ""
    assert result_json([("m.a", {"x": 1})], several=False) == '{"x":1}'
    assert json.loads(result_json([("m.a", 1), ("m.b", "é")], several=True)) == {
        "m.a": 1,
        "m.b": "é",
    }
    # a topic with several listeners keeps a mapping even when only one returned something
    assert json.loads(result_json([("m.a", 0)], several=True)) == {"m.a": 0}


def test_the_size_limit_and_json_name_the_listener() -> None:
    assert MAX_RESULT_BYTES == 65_536
    assert result_json([("m.a", "x" * 8)], several=False, max_bytes=10) == '"xxxxxxxx"'
    with pytest.raises(ResultTooLarge, match=r"listener m\.a is 11 bytes.*result_bytes") as big:
        result_json([("m.a", "x" * 9)], several=False, max_bytes=10)
    assert big.value.listener == "m.a" and big.value.code == "result_too_large"
    # together over the limit: the largest value's listener is named
    with pytest.raises(ResultTooLarge, match=r"listener m\.b") as both:
        result_json([("m.a", "x"), ("m.b", "y" * 30)], several=True, max_bytes=40)
    assert both.value.listener == "m.b"
    for bad in (object(), math.nan, {1: "non-str key"}, "nul \x00"):
        with pytest.raises(ResultNotSerializable, match=r"the result of listener m\.a") as exc:
            result_json([("m.a", bad)], several=False)
        assert exc.value.code == "result_not_serializable"


async def test_a_settlement_carries_the_result_or_fails_and_retries() -> None:
    done = await run_attempt(JOB, [returns_dict], clock)
    assert done.outcome == "succeeded" and done.result_json == '{"rows":3}'
    assert done.detail_json == '{"rows":3}'
    quiet = await run_attempt(JOB, [returns_none], clock)
    assert quiet.result_json == "" and quiet.detail_json == ""

    big = DispatchResult(listeners=1, results=(("m.a", "x" * 100),))
    failed = settlement(JOB, big, NOW, rand=lambda: 0.5, result_bytes=64)
    assert failed.outcome == "failed" and failed.result_json == ""
    assert failed.error is not None and failed.error["type"] == "result_too_large"
    assert failed.error["listener"] == "m.a" and "m.a" in failed.error["message"]
    assert failed.retry_at_ms == NOW + 10_000  # attempt 1 of 3: the job's backoff

    odd = DispatchResult(listeners=1, results=(("m.a", {"when": object()}),))
    failed = settlement(JOB, odd, NOW, rand=lambda: 0.5)
    assert failed.error is not None and failed.error["type"] == "result_not_serializable"
