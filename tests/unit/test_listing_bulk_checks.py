"""Listing and bulk scheduling apart from Redis: the page cursor's codec and the
request checks of jobs(); schedule_many's item checks, each error naming its item."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest

from scheduler import (
    InvalidDelay,
    InvalidJobId,
    InvalidPayload,
    InvalidTimezone,
    InvalidTopic,
    JobState,
    RetryPolicy,
    RetryPolicyInvalid,
    ScheduleError,
)
from scheduler.core.validation import build_job
from scheduler.facade.bulk import build_jobs
from scheduler.store.listing import MAX_LIMIT, Cursor, Walk, check_limit, check_state

NOW = 1_800_000_000_000
BUILD = partial(build_job, default_retry=RetryPolicy(), default_timeout_ms=60_000, now_ms=NOW)


# ------------------------------------------------------------------- cursor
@pytest.mark.parametrize(
    "cursor",
    [
        Cursor("due", "1800000000000", "a"),
        Cursor("cancelled", "0", "ünï/cødé id=="),
        Cursor("completed", "-12.5", "x" * 200),
        Cursor("p:-5", "1", "b"),
        Cursor("pk:pay.ments", "2", "c"),
    ],
)
def test_a_cursor_survives_its_text_form(cursor: Cursor) -> None:
    text = cursor.encode()
    assert Cursor.decode(text) == cursor
    assert text.isascii() and "=" not in text and "/" not in text and "+" not in text  # URL-safe


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "bad",
    [
        None,
        "",
        42,
        "not base64!!",
        _b64(b"not json"),
        _b64(b"{}"),
        _b64(b'["due", "5"]'),
        _b64(b'[1, "5", "a"]'),
        _b64(b'["dead", "5", "a"]'),
        _b64(b'["p:x", "5", "a"]'),
        _b64(b'["pk:", "5", "a"]'),
        _b64(b'[true, "5", "a"]'),
        _b64(b'["due", "x", "a"]'),
        _b64(b'["due", "inf", "a"]'),
        _b64(b'["due", 5, "a"]'),
        _b64(b'["due", "5", ""]'),
    ],
)
def test_an_invalid_cursor_is_refused_naming_the_cursor(bad: object) -> None:
    with pytest.raises(ScheduleError) as info:
        Cursor.decode(bad)
    assert info.value.field == "cursor"


def test_a_cursor_of_another_state_is_refused() -> None:
    done = Cursor("completed", "5", "a").encode()
    assert Walk.of(None, None).start(done) == Cursor("completed", "5", "a")
    assert Walk.of(None, "completed").start(done) == Cursor("completed", "5", "a")
    with pytest.raises(ScheduleError) as info:
        Walk.of(None, "scheduled").start(done)
    assert info.value.field == "cursor"


# -------------------------------------------------------- limit, state, walk
@pytest.mark.parametrize("bad", [0, -1, MAX_LIMIT + 1, 1.5, "10", True, None])
def test_limit_must_be_an_int_from_1_to_1000(bad: object) -> None:
    with pytest.raises(ScheduleError) as info:
        check_limit(bad)
    assert info.value.field == "limit"
    assert check_limit(1) == 1 and check_limit(MAX_LIMIT) == MAX_LIMIT


def test_state_is_a_member_its_value_or_its_name() -> None:
    for state in JobState:
        assert check_state(state) is state and check_state(state.value) is state
        assert check_state(state.name) is state
    assert check_state(None) is None
    for bad in ("done", "Running", 3):
        with pytest.raises(ScheduleError) as info:
            check_state(bad)
        assert info.value.field == "state"


def test_each_state_walks_its_own_set_filtering_only_where_the_set_is_shared() -> None:
    assert Walk.of(None, None) == Walk(
        ("waiting", "waiting_for_parents", "active", "completed", "failed", "cancelled"), "", ""
    )
    assert Walk.of(None, "waiting_for_parents") == Walk(("waiting_for_parents",), "", "")
    assert Walk.of("t", "scheduled") == Walk(("waiting",), "scheduled", "t")
    assert Walk.of(None, JobState.RETRYING) == Walk(("waiting",), "retrying", "")
    assert Walk.of(None, "RUNNING") == Walk(
        ("active",), "running", ""
    )  # a cancelled job may run on
    assert [Walk.of(None, s) for s in ("completed", "failed", "cancelled")] == [
        Walk(("completed",), "", ""),
        Walk(("failed",), "", ""),
        Walk(("cancelled",), "", ""),
    ]


def test_waiting_sets_run_from_the_highest_priority_to_the_parked_ones() -> None:
    walk = Walk.of(None, None)
    assert walk.sets(["-1", "5", "2"], ["b", "a"]) == [
        "p:5",
        "p:2",
        "due",
        "p:-1",
        "pk:a",
        "pk:b",
        "waiting_for_parents",
        "active",
        "completed",
        "failed",
        "cancelled",
    ]
    assert Walk.of("a", "scheduled").sets(["3"], ["b", "a"]) == ["p:3", "due", "pk:a"]
    with pytest.raises(InvalidTopic):
        Walk.of("", None)


# --------------------------------------------------------------------- bulk
def _items(n: int, **at: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"topic": "t", "payload": {"i": i}} for i in range(n)]
    for index, item in at.items():
        items[int(index.removeprefix("i"))] = item
    return items


def test_items_become_jobs_in_order_with_run_at_delay_or_now() -> None:
    when = datetime(2027, 1, 15, 9, 0, tzinfo=UTC)
    jobs = build_jobs(
        [
            {"topic": "a", "run_at": when, "job_id": "x"},
            {"topic": "b", "delay": "30s", "payload": [1]},
            {"topic": "c", "run_at": datetime(2027, 1, 15, 10, 0), "tz": "Europe/Berlin"},
            {
                "topic": "d",
                "delay": timedelta(minutes=1),
                "retry": {"attempts": 2},
                "metadata": {"k": "v"},
                "timeout": "5s",
            },
            {"topic": "e"},
        ],
        BUILD,
        NOW,
    )
    assert [j.topic for j in jobs] == ["a", "b", "c", "d", "e"] and jobs[0].id == "x"
    assert jobs[0].due_ms == int(when.timestamp() * 1000)
    assert jobs[1].due_ms == NOW + 30_000 and jobs[1].payload_json == "[1]"
    assert jobs[2].due_ms == int(datetime(2027, 1, 15, 9, 0, tzinfo=UTC).timestamp() * 1000)
    assert jobs[2].tz == "Europe/Berlin"
    assert (jobs[3].due_ms, jobs[3].max_attempts, jobs[3].metadata_json, jobs[3].timeout_ms) == (
        NOW + 60_000,
        2,
        '{"k":"v"}',
        5_000,
    )
    assert jobs[4].due_ms == NOW and len({j.id for j in jobs}) == 5
    assert build_jobs([], BUILD, NOW) == []


@pytest.mark.parametrize(
    ("item", "error", "field"),
    [
        ({"topic": ""}, InvalidTopic, "items[7].topic"),
        ({"payload": 1}, InvalidTopic, "items[7].topic"),
        ({"topic": "t", "payload": {1, 2}}, InvalidPayload, "items[7].payload"),
        ({"topic": "t", "metadata": [1]}, InvalidPayload, "items[7].metadata"),
        ({"topic": "t", "tz": "Mars/Base"}, InvalidTimezone, "items[7].tz"),
        ({"topic": "t", "run_at": "tomorrow"}, InvalidDelay, "items[7].run_at"),
        ({"topic": "t", "delay": -1}, InvalidDelay, "items[7].delay"),
        (
            {"topic": "t", "delay": 1, "run_at": datetime.now(UTC)},
            InvalidDelay,
            "items[7].delay",
        ),
        ({"topic": "t", "retry": {"attempts": 0}}, RetryPolicyInvalid, None),
        ({"topic": "t", "job_id": ""}, InvalidJobId, "items[7].job_id"),
        ({"topic": "t", "when": 1}, ScheduleError, "items[7].when"),
        ("t", ScheduleError, "items[7]"),
    ],
)
def test_a_bad_item_raises_its_own_error_naming_the_item(
    item: Any, error: type[ScheduleError], field: str | None
) -> None:
    with pytest.raises(error) as info:
        build_jobs(_items(10, i7=item), BUILD, NOW)
    assert type(info.value) is error
    assert info.value.field is not None and info.value.field.startswith("items[7]")
    if field is not None:
        assert info.value.field == field
    assert str(info.value).startswith(f"{info.value.field}: ")


def test_an_unknown_key_is_named_with_its_item() -> None:
    with pytest.raises(ScheduleError) as info:
        build_jobs(_items(3, i2={"topic": "t", "paylod": 1}), BUILD, NOW)
    assert info.value.field == "items[2].paylod" and "'paylod'" in str(info.value)


def test_a_job_id_given_twice_in_one_call_is_refused() -> None:
    items = _items(5, i1={"topic": "t", "job_id": "same"}, i4={"topic": "u", "job_id": "same"})
    with pytest.raises(InvalidJobId) as info:
        build_jobs(items, BUILD, NOW)
    assert info.value.field == "items[4].job_id" and "items[1]" in str(info.value)
