"""TopicOptions: every field checked (naming the field, the value and what is allowed),
normalised, encoded into the hash fields the Lua engine reads, and decoded back equal."""

from __future__ import annotations

import random
from dataclasses import fields
from datetime import timedelta
from typing import Any

import pytest

from scheduler import (
    Backoff,
    InvalidFlowOption,
    InvalidTopic,
    RateLimit,
    RetryPolicy,
    RetryPolicyInvalid,
    ScheduleError,
    TopicOptions,
)
from scheduler.core.topic_options import (
    POLICIES,
    check_topic_options,
    describe,
    topic_fields,
    topic_options,
)
from scheduler.facade.topics import _decode_cursor, _encode_cursor

DEFAULT = RetryPolicy(5, Backoff("exponential", 30_000, 3_600_000, "none"))
STORED_FIELDS = {
    "policy",
    "dead_letter",
    "max",
    "btype",
    "bdelay",
    "bmax",
    "bjit",
    "timeout",
    "rl_max",
    "rl_per",
    "rl_key",
    "concurrency",
    "prio",
    "warn",
}
RETRY_FIELDS = {"max", "btype", "bdelay", "bmax", "bjit"}


def check(options: TopicOptions, name: str = "pay") -> TopicOptions:
    return check_topic_options(name, options, DEFAULT)


def test_the_eight_fields() -> None:
    assert [f.name for f in fields(TopicOptions)] == [
        "policy",
        "retry",
        "timeout",
        "rate_limit",
        "concurrency",
        "priority_default",
        "warning_size",
        "dead_letter",
    ]


def test_defaults_store_only_the_policy() -> None:
    assert topic_fields(check(TopicOptions())) == {"policy": "standard"}
    assert topic_options({"policy": "standard"}) == TopicOptions()


def test_every_field_is_stored_under_the_engine_s_names() -> None:
    options = TopicOptions(
        policy="key_strict_fifo",
        retry={"attempts": 3, "backoff": {"type": "fixed", "delay": 10_000}},
        timeout="2m",
        rate_limit=RateLimit(50, "1s", per_key=True),
        concurrency=4,
        priority_default="high",
        warning_size=1_000,
        dead_letter="pay.dlq",
    )
    assert topic_fields(check(options)) == {
        "policy": "key_strict_fifo",
        "dead_letter": "pay.dlq",
        "max": "3",
        "btype": "fixed",
        "bdelay": "10000",
        "bmax": "3600000",
        "bjit": "none",
        "timeout": "120000",
        "rl_max": "50",
        "rl_per": "1000",
        "rl_key": "1",
        "concurrency": "4",
        "prio": "1",
        "warn": "1000",
    }


def test_normalised_forms() -> None:
    got = check(
        TopicOptions(
            retry={"attempts": 2},
            timeout=1.5,
            rate_limit=RateLimit(1, timedelta(minutes=1)),
            priority_default="low",
        )
    )
    assert got.retry == RetryPolicy(2, DEFAULT.backoff), "omitted keys: the default"
    assert got.timeout == timedelta(milliseconds=1_500)
    assert got.rate_limit == RateLimit(1, "1m") and got.rate_limit.per_ms() == 60_000
    assert got.priority_default == -1
    assert check(TopicOptions(timeout=timedelta(microseconds=2_400))).timeout == timedelta(
        milliseconds=2
    ), "ms"


# Pools of valid values per field (None / default included), for the round-trip property.
POOLS: dict[str, list[Any]] = {
    "policy": list(POLICIES),
    "retry": [
        None,
        RetryPolicy(1),
        {"attempts": 20},
        {"backoff": {"type": "fixed", "delay": 1_000, "jitter": "full"}},
        RetryPolicy(7, Backoff("exponential", 2_000, 86_400_000, "equal")),
    ],
    "timeout": [
        None,
        "2m",
        0.001,
        30,
        timedelta(days=30),
        "500ms",
        timedelta(seconds=1, microseconds=600),
    ],
    "rate_limit": [
        None,
        RateLimit(1, "1ms"),
        RateLimit(1_000_000, "1d", True),
        RateLimit(50, 1.25, False),
    ],
    "concurrency": [None, 1, 64, 1_000_000],
    "priority_default": [0, -1_000, 1_000, "low", "normal", "high", 7, "-3"],
    "warning_size": [None, 1, 50_000],
    "dead_letter": [None, "pay.dlq", "x" * 200],
}


def test_round_trip_property_over_many_combinations() -> None:
    rng = random.Random(14)
    cases = [
        TopicOptions(**{f: pool[0] for f, pool in POOLS.items()}),
        TopicOptions(**{f: pool[-1] for f, pool in POOLS.items()}),
    ]
    cases += [
        TopicOptions(**{f: rng.choice(pool) for f, pool in POOLS.items()}) for _ in range(1_500)
    ]
    for options in cases:
        normal = check(options)
        stored = topic_fields(normal)
        assert set(stored) <= STORED_FIELDS and all(
            isinstance(v, str) and v for v in stored.values()
        ), stored
        assert RETRY_FIELDS <= set(stored) or not RETRY_FIELDS & set(stored), (
            "all five retry fields or none"
        )
        assert topic_options(stored) == normal, options
        assert check(normal) == normal, "normalising is idempotent"
        assert isinstance(normal.retry, (RetryPolicy, type(None))) and isinstance(
            normal.priority_default, int
        )
        assert isinstance(normal.timeout, (timedelta, type(None)))
        assert ("prio" in stored) == (normal.priority_default != 0)
        doc = describe("pay", normal)
        assert list(doc) == [
            "name",
            "policy",
            "retry",
            "timeout_ms",
            "rate_limit",
            "concurrency",
            "priority_default",
            "warning_size",
            "dead_letter",
        ]


@pytest.mark.parametrize(
    "field, value, allowed",
    [
        (
            "policy",
            "fifo",
            "one of standard, short, singleton, stately, exclusive, key_strict_fifo",
        ),
        ("policy", None, "one of standard"),
        ("timeout", 0, "from 1 ms to 2,592,000,000 ms"),
        ("timeout", "31d", "from 1 ms to 2,592,000,000 ms"),
        ("timeout", "soon", "a timedelta, seconds, or a string like"),
        ("timeout", -1, "finite duration >= 0"),
        ("rate_limit", "50/1s", "must be a RateLimit"),
        ("rate_limit", {"max": 5, "per": 1}, "must be a RateLimit"),
        ("concurrency", 0, "from 1 to 1,000,000"),
        ("concurrency", -3, "from 1 to 1,000,000"),
        ("concurrency", 2.0, "an integer from 1"),
        ("concurrency", True, "an integer from 1"),
        ("priority_default", 1_001, "from -1,000 to 1,000"),
        ("priority_default", "urgent", "low (-1), normal (0), high (1)"),
        ("priority_default", None, "an integer from -1,000"),
        ("warning_size", 0, "from 1 to 1,000,000,000"),
    ],
)
def test_an_invalid_field_is_refused_naming_field_value_and_what_is_allowed(
    field: str, value: object, allowed: str
) -> None:
    with pytest.raises(InvalidFlowOption) as err:
        check(TopicOptions(**{field: value}))  # type: ignore[arg-type]
    assert err.value.field == field and isinstance(err.value, ScheduleError)
    message = str(err.value)
    assert (
        message.startswith(field)
        and allowed in message
        and repr(value)[:6] in message.replace(",", "")
    ), message


def test_retry_errors_stay_retry_policy_invalid() -> None:
    with pytest.raises(RetryPolicyInvalid) as err:
        check(TopicOptions(retry={"attempts": 0}))
    assert err.value.code == "SCHEDULE_RETRY_POLICY_INVALID" and err.value.field == "attempts"
    with pytest.raises(RetryPolicyInvalid):
        check(TopicOptions(retry="3 times"))  # type: ignore[arg-type]


def test_dead_letter_and_name_checks_are_kept() -> None:
    with pytest.raises(InvalidTopic, match="own dead-letter"):
        check(TopicOptions(dead_letter="pay"))
    with pytest.raises(InvalidTopic):
        check(TopicOptions(dead_letter=""))
    with pytest.raises(InvalidTopic):
        check(TopicOptions(), name="schedule.failed")
    with pytest.raises(ScheduleError, match="options must be TopicOptions"):
        check({"policy": "standard"})  # type: ignore[arg-type]


def test_cursor_round_trips() -> None:
    assert _decode_cursor(_encode_cursor(1_800_000_000_000, "abc.def")) == (
        1_800_000_000_000,
        "abc.def",
    )


def test_dead_letter_args_only_for_a_terminal_failure_with_the_message_cut_to_256() -> None:
    from scheduler.core.job import Settlement, dead_letter_args
    from scheduler.core.outbox import error_record

    error = error_record("ValueError", "é" * 1_000)
    assert dead_letter_args(Settlement("j", "t", "failed", error, retry_at_ms=5)) == ("", "", "")
    dl_id, kind, message = dead_letter_args(Settlement("j", "t", "failed", error))
    assert len(dl_id) == 16 and kind == "ValueError" and message == "é" * 256
