"""RateLimit, Dedupe and priorities (scheduler/core/flow.py): checked when built, durations kept
as whole milliseconds, every refusal an InvalidFlowOption naming field, value and bounds."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler import Dedupe, InvalidFlowOption, RateLimit
from scheduler.core.flow import PRIORITY_ALIASES, parse_priority


@pytest.mark.parametrize(
    "per, ms",
    [
        ("1s", 1_000),
        (1, 1_000),
        (0.001, 1),
        (timedelta(days=1), 86_400_000),
        ("500ms", 500),
        ("1.5m", 90_000),
        (timedelta(microseconds=1_600), 2),
    ],
)
def test_rate_limit_per_is_normalised_to_whole_ms(per: object, ms: int) -> None:
    rl = RateLimit(10, per)  # type: ignore[arg-type]
    assert rl.per == timedelta(milliseconds=ms) and rl.per_ms() == ms
    assert rl == RateLimit(10, timedelta(milliseconds=ms))


@pytest.mark.parametrize(
    "kwargs, field, allowed",
    [
        ({"max": 0, "per": "1s"}, "rate_limit.max", "from 1 to 1,000,000"),
        ({"max": 1_000_001, "per": "1s"}, "rate_limit.max", "from 1 to 1,000,000"),
        ({"max": "5", "per": "1s"}, "rate_limit.max", "an integer"),
        ({"max": True, "per": "1s"}, "rate_limit.max", "an integer"),
        ({"max": 5, "per": 0}, "rate_limit.per", "from 1 ms to 86,400,000 ms"),
        ({"max": 5, "per": "2d"}, "rate_limit.per", "from 1 ms to 86,400,000 ms"),
        ({"max": 5, "per": -1}, "rate_limit.per", ">= 0"),
        ({"max": 5, "per": "fast"}, "rate_limit.per", "a string like"),
        ({"max": 5, "per": "1s", "per_key": "yes"}, "rate_limit.per_key", "True or False"),
    ],
)
def test_rate_limit_refusals(kwargs: dict[str, object], field: str, allowed: str) -> None:
    with pytest.raises(InvalidFlowOption) as err:
        RateLimit(**kwargs)  # type: ignore[arg-type]
    assert (
        err.value.field == field and allowed in str(err.value) and str(err.value).startswith(field)
    )


def test_dedupe_normalises_the_window() -> None:
    assert Dedupe("k").window is None and Dedupe("k").window_ms() is None
    d = Dedupe("order:1", "2m", "debounce")
    assert d.window == timedelta(minutes=2) and d.window_ms() == 120_000
    assert Dedupe("k", timedelta(days=30)).window_ms() == 30 * 86_400_000
    assert Dedupe("x" * 512, 1).key == "x" * 512


@pytest.mark.parametrize(
    "kwargs, field, allowed",
    [
        ({"key": ""}, "dedupe.key", "non-empty string of at most 512"),
        ({"key": "x" * 513}, "dedupe.key", "(513 chars)"),
        ({"key": "a\x00b"}, "dedupe.key", "without NUL"),
        ({"key": 5}, "dedupe.key", "non-empty string"),
        ({"key": "k", "window": "31d"}, "dedupe.window", "to 2,592,000,000 ms"),
        ({"key": "k", "window": 0}, "dedupe.window", "from 1 ms"),
        ({"key": "k", "mode": "debounce"}, "dedupe.window", "required with mode 'debounce'"),
        (
            {"key": "k", "window": "1s", "mode": "latest"},
            "dedupe.mode",
            "one of throttle, debounce",
        ),
    ],
)
def test_dedupe_refusals(kwargs: dict[str, object], field: str, allowed: str) -> None:
    with pytest.raises(InvalidFlowOption) as err:
        Dedupe(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field and allowed in str(err.value), str(err.value)


def test_priority_aliases_and_range() -> None:
    assert PRIORITY_ALIASES == {"low": -1, "normal": 0, "high": 1}
    assert [
        parse_priority(v) for v in ("low", "normal", "high", " High ", -1_000, 1_000, "-7", 0)
    ] == [-1, 0, 1, 1, -1_000, 1_000, -7, 0]
    for bad in (1_001, -1_001, "urgent", 1.0, None, False):
        with pytest.raises(InvalidFlowOption) as err:
            parse_priority(bad, "job.priority")
        assert err.value.field == "job.priority" and "-1,000" in str(err.value)
