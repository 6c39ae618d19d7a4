"""Retry policy: defaults, bounds, the error code, and the decision per attempt."""

from __future__ import annotations

import pytest

from scheduler import Backoff, DoNotRetry, Retry, RetryPolicy, RetryPolicyInvalid, ScheduleError
from scheduler.core.retry import RetryDecision, parse_retry

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
        (
            lambda: Backoff("fixed", delay_ms=999),
            "backoff.delay",
            "from 1,000 to 3,600,000; got 999",
        ),
        (lambda: Backoff("fixed", delay_ms=3_600_001), "backoff.delay", "got 3,600,001"),
        (
            lambda: Backoff("linear", delay_ms=1000),
            "backoff.type",
            "exponential, fixed; got 'linear'",
        ),  # type: ignore[arg-type]
        (
            lambda: Backoff("fixed", 1_000, max_delay_ms=999),
            "backoff.max_delay",
            "from 1,000 to 86,400,000; got 999",
        ),
        (
            lambda: Backoff("fixed", 1_000, max_delay_ms=86_400_001),
            "backoff.max_delay",
            "got 86,400,001",
        ),
        (
            lambda: Backoff("fixed", 1_000, max_delay_ms=60_000.0),
            "backoff.max_delay",
            "60000.0 (float)",
        ),  # type: ignore[arg-type]
        (
            lambda: Backoff("fixed", 60_000, max_delay_ms=59_999),
            "backoff.max_delay",
            ">= backoff.delay (60,000); got 59,999",
        ),
        (
            lambda: Backoff("fixed", 1_000, jitter="half"),
            "backoff.jitter",
            "none, full, equal; got 'half'",
        ),  # type: ignore[arg-type]
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
    Backoff("fixed", 1_000, max_delay_ms=1_000)
    Backoff("exponential", 3_600_000, max_delay_ms=86_400_000, jitter="equal")


def test_the_contract_signature() -> None:
    b = Backoff("exponential", 30_000)
    assert (b.max_delay_ms, b.jitter) == (3_600_000, "none")
    assert Backoff("fixed", 1_000, 5_000, "full") == Backoff(
        type="fixed", delay_ms=1_000, max_delay_ms=5_000, jitter="full"
    )


def test_the_cap_bounds_every_gap_of_twenty_attempts() -> None:
    for base in (30_000, 3_600_000):
        policy = RetryPolicy(20, Backoff("exponential", base))
        delays = [policy.decide(k).delay_ms for k in range(1, 20)]  # type: ignore[union-attr]
        assert max(delays) == 3_600_000 and all(1_000 <= d <= 3_600_000 for d in delays)
    policy = RetryPolicy(20, Backoff("exponential", 30_000, max_delay_ms=300_000))
    delays = [policy.decide(k).delay_ms for k in range(1, 20)]  # type: ignore[union-attr]
    assert delays[:5] == [30_000, 60_000, 120_000, 240_000, 300_000] and set(delays[4:]) == {
        300_000
    }
    # the default cap changes nothing below an hour: 30 s * 2^6 = 32 min, then the hour
    assert [DEFAULT.backoff.delay_for_retry(k) for k in (7, 8, 9)] == [
        1_920_000,
        3_600_000,
        3_600_000,
    ]


def test_a_fixed_backoff_ignores_the_cap_it_cannot_reach() -> None:
    assert Backoff("fixed", 10_000, max_delay_ms=10_000).delay_for_retry(19) == 10_000


@pytest.mark.parametrize(
    ("jitter", "low", "high"),
    [("none", 240_000, 240_000), ("full", 1_000, 240_000), ("equal", 120_000, 240_000)],
)
def test_each_jitter_mode_stays_in_its_range(jitter: str, low: int, high: int) -> None:
    backoff = Backoff("exponential", 30_000, jitter=jitter)  # type: ignore[arg-type]
    at = [backoff.delay_for_retry(4, lambda r=r: r) for r in (0.0, 0.25, 0.5, 0.999999)]
    assert min(at) == low and max(at) <= high and max(at) >= high - 1
    assert at == sorted(at)


def test_jitter_values_with_a_fixed_draw() -> None:
    assert Backoff("fixed", 10_000, jitter="full").delay_for_retry(1, lambda: 0.5) == 5_000
    assert Backoff("fixed", 10_000, jitter="equal").delay_for_retry(1, lambda: 0.5) == 7_500
    assert Backoff("fixed", 10_000, jitter="none").delay_for_retry(1, lambda: 0.5) == 10_000
    # full jitter never goes below the 1 s minimum; the cap comes before the jitter
    assert Backoff("fixed", 10_000, jitter="full").delay_for_retry(1, lambda: 0.0) == 1_000
    capped = Backoff("exponential", 60_000, max_delay_ms=100_000, jitter="equal")
    assert capped.delay_for_retry(10, lambda: 0.0) == 50_000
    assert RetryPolicy(3, capped).decide(2, ValueError(), lambda: 0.5).delay_ms == 75_000  # type: ignore[union-attr]


def test_dict_form_is_accepted() -> None:
    policy = parse_retry({"attempts": 3, "backoff": {"type": "fixed", "delay": 10000}}, DEFAULT)
    assert policy == RetryPolicy(3, Backoff("fixed", 10_000))
    assert policy.to_dict() == {
        "attempts": 3,
        "backoff": {"type": "fixed", "delay": 10000, "max_delay": 3_600_000, "jitter": "none"},
    }
    assert parse_retry(policy.to_dict(), DEFAULT) == policy
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


def test_dict_form_takes_max_delay_and_jitter() -> None:
    policy = parse_retry(
        {
            "attempts": 4,
            "backoff": {
                "type": "exponential",
                "delay": 2_000,
                "max_delay": 8_000,
                "jitter": "equal",
            },
        },
        DEFAULT,
    )
    assert policy == RetryPolicy(4, Backoff("exponential", 2_000, 8_000, "equal"))
    assert parse_retry({"backoff": {"jitter": "full"}}, DEFAULT).backoff == Backoff(
        "exponential", 30_000, jitter="full"
    )
    with pytest.raises(RetryPolicyInvalid, match="allowed: type, delay, max_delay, jitter") as info:
        parse_retry({"backoff": {"type": "fixed", "delay": 1_000, "cap": 5_000}}, DEFAULT)
    assert info.value.field == "backoff"
    with pytest.raises(RetryPolicyInvalid) as info:
        parse_retry({"backoff": {"delay": 10_000, "max_delay": 5_000}}, DEFAULT)
    assert (info.value.code, info.value.field) == (
        "SCHEDULE_RETRY_POLICY_INVALID",
        "backoff.max_delay",
    )


def test_listener_decisions() -> None:
    assert DEFAULT.decide(1, DoNotRetry()) is None
    assert DEFAULT.decide(1, Retry(delay=2.5)).delay_ms == 2_500  # type: ignore[union-attr]
    assert DEFAULT.decide(5, Retry(delay=2.5)) is None  # attempts still bound retries
    assert DEFAULT.decide(2, ValueError("x")).delay_ms == 60_000  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("delay_s", "applied_ms"),
    [
        (0, 1_000),
        (-5, 1_000),
        (0.2, 1_000),
        (1e7, 3_600_000),
        (float("inf"), 3_600_000),
        (float("nan"), 1_000),
    ],
)
def test_a_listeners_retry_delay_is_clamped_into_the_bounds(
    delay_s: float, applied_ms: int
) -> None:
    decision = DEFAULT.decide(1, Retry(delay=delay_s))
    assert decision is not None and decision.delay_ms == applied_ms
    assert decision.requested_ms is not None  # the caller logs the clamp


def test_a_listeners_retry_delay_is_capped_by_the_jobs_own_max_delay() -> None:
    policy = RetryPolicy(3, Backoff("fixed", 1_000, max_delay_ms=86_400_000, jitter="full"))
    assert policy.decide(1, Retry(delay=36_000)) == RetryDecision(
        36_000_000
    )  # within bounds: as asked, no jitter
    assert policy.decide(1, Retry(delay=1e7)) == RetryDecision(86_400_000, 1e10)
    small = RetryPolicy(3, Backoff("fixed", 1_000, max_delay_ms=5_000))
    assert small.decide(1, Retry(delay=60)) == RetryDecision(5_000, 60_000.0)
