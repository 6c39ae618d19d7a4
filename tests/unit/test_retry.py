"""Retry policy: defaults, bounds, the error code, and the decision per attempt."""

from __future__ import annotations

import pytest

from scheduler import Backoff, DoNotRetry, Retry, RetryPolicy, RetryPolicyInvalid, ScheduleError
from scheduler.retry import parse_retry

DEFAULT = RetryPolicy()


def test_defaults_are_five_attempts_exponential_from_30s() -> None:
    assert DEFAULT.attempts == 5
    assert DEFAULT.backoff == Backoff("exponential", 30_000)
    delays = [DEFAULT.decide(k).delay_ms for k in range(1, 5)]  # type: ignore[union-attr]
    assert delays == [30_000, 60_000, 120_000, 240_000]
    assert DEFAULT.decide(5) is None


def test_fixed_backoff_repeats_the_same_delay() -> None:
    policy = RetryPolicy(3, Backoff("fixed", delay_ms=10_000))
    assert [policy.decide(k).delay_ms for k in (1, 2)] == [10_000, 10_000]  # type: ignore[union-attr]
    assert policy.decide(3) is None


@pytest.mark.parametrize(
    ("build", "field", "fragment"),
    [
        (lambda: RetryPolicy(attempts=0), "attempts", "from 1 to 20; got 0"),
        (lambda: RetryPolicy(attempts=21), "attempts", "got 21"),
        (lambda: RetryPolicy(attempts="3"), "attempts", "'3' (str)"),  # type: ignore[arg-type]
        (lambda: RetryPolicy(attempts=True), "attempts", "True (bool)"),
        (lambda: RetryPolicy(attempts=2.0), "attempts", "2.0 (float)"),  # type: ignore[arg-type]
        (lambda: Backoff("fixed", delay_ms=999), "backoff.delay", "from 1,000 to 3,600,000; got 999"),
        (lambda: Backoff("fixed", delay_ms=3_600_001), "backoff.delay", "got 3,600,001"),
        (lambda: Backoff("linear", delay_ms=1000), "backoff.type", "exponential, fixed; got 'linear'"),  # type: ignore[arg-type]
    ],
)
def test_out_of_bounds_is_rejected_with_the_code(build, field: str, fragment: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RetryPolicyInvalid) as info:
        build()
    assert info.value.code == "SCHEDULE_RETRY_POLICY_INVALID"
    assert info.value.field == field
    assert fragment in str(info.value)
    assert isinstance(info.value, ScheduleError)


def test_bounds_themselves_are_allowed() -> None:
    RetryPolicy(1, Backoff("fixed", 1_000))
    RetryPolicy(20, Backoff("exponential", 3_600_000))


def test_dict_form_is_accepted() -> None:
    policy = parse_retry({"attempts": 3, "backoff": {"type": "fixed", "delay": 10000}}, DEFAULT)
    assert policy == RetryPolicy(3, Backoff("fixed", 10_000))
    assert policy.to_dict() == {"attempts": 3, "backoff": {"type": "fixed", "delay": 10000}}
    assert parse_retry(None, DEFAULT) is DEFAULT
    assert parse_retry({"attempts": 2}, DEFAULT) == RetryPolicy(2, DEFAULT.backoff)


@pytest.mark.parametrize(
    "value",
    [
        {"attempts": 3, "backoff": {"type": "fixed", "delay": 10}},
        {"attempts": 3, "backoff": {"type": "fixed", "delay": "10000"}},
        {"attempts": 3, "backoff": {"type": "quadratic", "delay": 10000}},
        {"attempts": 3, "backoff": {"type": "fixed", "delay": 10000, "jitter": 1}},
        {"attempts": 3, "backof": {}},
        {"attempts": None},
        {"attempts": 3, "backoff": 5},
        [3],
        "3 attempts",
    ],
)
def test_bad_dict_forms_are_rejected(value: object) -> None:
    with pytest.raises(RetryPolicyInvalid) as info:
        parse_retry(value, DEFAULT)  # type: ignore[arg-type]
    assert info.value.code == "SCHEDULE_RETRY_POLICY_INVALID"


def test_listener_decisions() -> None:
    assert DEFAULT.decide(1, DoNotRetry()) is None
    assert DEFAULT.decide(1, Retry(delay=2.5)).delay_ms == 2_500  # type: ignore[union-attr]
    assert DEFAULT.decide(5, Retry(delay=2.5)) is None  # attempts still bound retries
    assert DEFAULT.decide(2, ValueError("x")).delay_ms == 60_000  # type: ignore[union-attr]
