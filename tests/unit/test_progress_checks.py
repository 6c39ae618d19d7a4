"""The checks and stored forms of event.progress() and event.log() (scheduler/core/progress.py),
and the event's calls without a reporter (a listener's own unit test)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from listeners import ScheduleArrivedEvent
from scheduler.core.errors import InvalidProgress
from scheduler.core.progress import (
    TEXT_BYTES,
    TRUNCATED,
    LogLine,
    Progress,
    check_percent,
    clip,
    log_entry,
    parse_log,
    parse_progress,
    progress_text,
)


@pytest.mark.parametrize("value, stored", [(0, 0), (40, 40), (40.0, 40), (33.5, 33.5), (100, 100)])
def test_percent_in_bounds_is_kept(value: float, stored: float) -> None:
    got = check_percent(value)
    assert got == stored and type(got) is type(stored)


@pytest.mark.parametrize(
    "value, message",
    [
        (-1, "percent must be from 0 to 100, got -1"),
        (100.5, "percent must be from 0 to 100, got 100.5"),
        (float("nan"), "percent must be from 0 to 100, got nan"),
        (True, "percent must be a number from 0 to 100, got bool True"),
        ("50", "percent must be a number from 0 to 100, got str '50'"),
        (None, "percent must be a number from 0 to 100, got NoneType None"),
    ],
)
def test_percent_out_of_bounds_is_refused_naming_field_and_value(
    value: object, message: str
) -> None:
    with pytest.raises(InvalidProgress) as refused:
        progress_text(1, value, "m")
    assert str(refused.value) == message and refused.value.field == "percent"


def test_text_over_one_kib_is_cut_on_a_character_with_a_marker() -> None:
    assert clip("x" * TEXT_BYTES, "line") == "x" * TEXT_BYTES
    cut = clip("é" * TEXT_BYTES, "line")  # two bytes each: the cut must not split one
    assert cut.endswith(TRUNCATED) and len(cut.encode()) <= TEXT_BYTES
    assert set(cut.removesuffix(TRUNCATED)) == {"é"} and len(cut.encode()) > TEXT_BYTES - 2 - len(
        TRUNCATED.encode()
    )
    assert clip("a\udc80b", "line") == "a?b"  # a lone surrogate cannot reach Redis
    with pytest.raises(InvalidProgress, match="line must be a str, got int 5") as refused:
        log_entry(1, 0, 5)
    assert refused.value.field == "line"
    with pytest.raises(InvalidProgress, match="message must be a str, got list") as refused:
        progress_text(1, 5, ["m"])
    assert refused.value.field == "message"


def test_stored_forms_read_back() -> None:
    assert parse_progress(progress_text(2, 40, "rendered 4/10 pages"), 2) == Progress(
        40, "rendered 4/10 pages"
    )
    assert parse_progress(progress_text(2, 12.5), 2) == (12.5, None)
    assert (
        parse_progress(progress_text(1, 90, "old"), 2) is None
    )  # an earlier attempt's: not this one's
    assert parse_progress(None, 1) is None
    line = parse_log(log_entry(3, 1_800_000_000_000, "step 2 of 3: ok"))
    assert line == "step 2 of 3: ok" and isinstance(line, LogLine)
    assert (line.attempt, line.at) == (3, datetime(2027, 1, 15, 8, 0, tzinfo=UTC))
    assert parse_log(log_entry(1, 5, "two\nlines  spaced ")) == "two\nlines  spaced "


async def test_an_event_built_by_hand_records_nothing() -> None:
    event = ScheduleArrivedEvent("j", "t", None, 1, 1, datetime(2027, 1, 1, tzinfo=UTC))
    await event.progress(50, "half")
    await event.log("line")
    assert event.reporter is None
