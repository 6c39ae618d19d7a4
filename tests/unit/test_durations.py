"""Compound duration strings ("1h30m") wherever a duration is accepted, and errors
that name the field and say what is wrong ("1h30", "h", "-5m")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from scheduler import Dedupe, InvalidDelay, InvalidFlowOption, RateLimit, RetryPolicy, TopicOptions
from scheduler.cli.topics import parse_rate_limit
from scheduler.core.request import JobRequest
from scheduler.core.timeutil import parse_duration
from scheduler.core.topic_options import check_topic_options
from scheduler.core.validation import build_job


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1h30m", 5400),
        ("2m30s", 150),
        ("1d12h", 129600),
        ("500ms", 0.5),
        ("1m30s500ms", 90.5),
        ("1h 30m", 5400),
        (" 1d 2h 3m 4s ", 93784),
        ("1.5h", 5400),
        ("0s", 0),
        ("1h0m", 3600),
    ],
)
def test_compound_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "timeout") == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1h30", "the number '30' has no unit"),
        ("h", "a unit needs a number"),
        ("-5m", "must be a duration >= 0"),
        ("30m1h", "largest first"),
        ("1h1h", "largest first"),
        ("5 minutes", "a string like '30s'"),
        ("soon", "a string like"),
        ("", "empty"),
        ("1h-5m", "must be a duration >= 0"),
        ("1w", "a string like"),
    ],
)
def test_bad_durations_name_the_field_and_the_problem(text: str, says: str) -> None:
    with pytest.raises(InvalidDelay) as info:
        parse_duration(text, "timeout")
    message = str(info.value)
    assert message.startswith("timeout") and says in message and info.value.field == "timeout"


def test_schedule_timeout_takes_a_compound_duration_and_names_timeout() -> None:
    args: dict[str, Any] = {
        "default_retry": RetryPolicy(),
        "default_timeout_ms": 60_000,
        "now_ms": 1_000,
    }

    def request(timeout: str) -> JobRequest:
        return JobRequest(topic="t", run_at_ms=5_000, timeout=timeout)

    assert build_job(request("1h30m"), **args).timeout_ms == 5_400_000
    with pytest.raises(InvalidDelay, match=r"^timeout '1h30': the number '30' has no unit") as info:
        build_job(request("1h30"), **args)
    assert info.value.field == "timeout"


def test_flow_options_take_compound_durations_and_name_their_field() -> None:
    def check(options: TopicOptions) -> TopicOptions:
        return check_topic_options("pay", options, RetryPolicy())

    assert check(TopicOptions(timeout="2m30s")).timeout == timedelta(seconds=150)
    assert RateLimit(10, "1m30s").per == timedelta(seconds=90)
    assert Dedupe("k", window="1h30m").window == timedelta(minutes=90)
    assert parse_rate_limit("50/1m30s", per_key=False).per == timedelta(seconds=90)
    with pytest.raises(InvalidFlowOption, match=r"^timeout '1h30': the number") as info:
        check(TopicOptions(timeout="1h30"))
    assert info.value.field == "timeout"
    with pytest.raises(InvalidFlowOption, match=r"^dedupe.window must be a duration >= 0"):
        Dedupe("k", window="-5m")
