"""Schedules declared beside listeners, pure: `@on_event(topic, cron=/every=...)` checks each
trigger argument where it is written (the field, the value, what is allowed), records one
declaration per name, and the interval arithmetic (epoch anchor, bounded deterministic jitter)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from listeners import Declaration, InvalidDeclaration, ListenerRegistry, on_event
from scheduler.core.cron import next_fire, plan_ticks
from scheduler.core.errors import InvalidCron
from scheduler.core.interval import IntervalSpec, parse_interval
from scheduler.core.job import CronInfo


async def noop(event: Any) -> None:
    pass


async def other(event: Any) -> None:
    pass


def test_existing_calls_declare_nothing() -> None:
    reg = ListenerRegistry()
    reg.on_event("plain")(noop)
    reg.on_event("typed", schema=dict)(noop)
    reg.on_event("typed", dict)(other)
    assert reg.declarations() == [] and reg.listeners("typed") == (noop, other)
    assert (
        on_event("never.registered.here") is not None
    )  # the module-level decorator keeps its signature


def test_a_cron_and_an_interval_are_recorded_with_derived_names() -> None:
    reg = ListenerRegistry()
    reg.on_event("billing.invoice", cron="0 3 * * *", tz="America/Chicago", misfire="coalesce")(
        noop
    )
    reg.on_event("billing.invoice", every="15m", jitter=timedelta(seconds=30))(other)
    reg.on_event("sync", every=90, name="sync-fast", payload={"full": False})(noop)
    assert reg.declarations() == [
        Declaration(
            "billing.invoice:cron",
            "billing.invoice",
            cron="0 3 * * *",
            tz="America/Chicago",
            misfire="coalesce",
        ),
        Declaration("billing.invoice:every", "billing.invoice", every_ms=900_000, jitter_ms=30_000),
        Declaration("sync-fast", "sync", every_ms=90_000, payload={"full": False}),
    ]
    assert [d.name for d in reg.declarations(["sync"])] == ["sync-fast"]
    assert reg.on_event("a", cron="@daily")(noop) and reg.declarations(["a"])[0].cron == "0 0 * * *"


def test_the_same_declaration_twice_is_one_and_a_different_one_under_a_name_is_refused() -> None:
    reg = ListenerRegistry()
    reg.on_event("t", cron="0 3 * * *")(noop)
    reg.on_event("t", cron="0 3 * * *")(noop)  # a module imported twice
    reg.on_event("t", cron="0 3 * * *")(other)  # a second listener repeating the topic's schedule
    assert len(reg.declarations()) == 1
    with pytest.raises(
        InvalidDeclaration, match="schedule 't:cron' is already declared .*own name="
    ) as info:
        reg.on_event("t", cron="0 4 * * *")(other)
    assert info.value.field == "name"
    reg.on_event("t", cron="0 4 * * *", name="t-at-4")(other)
    assert [d.name for d in reg.declarations()] == ["t-at-4", "t:cron"]


def test_a_declaration_goes_with_the_last_listener_declaring_it() -> None:
    reg = ListenerRegistry()
    reg.on_event("t", every="1h")(noop)
    reg.on_event("t", every="1h")(other)
    reg.remove("t", noop)
    assert [d.name for d in reg.declarations()] == ["t:every"]
    reg.remove("t", other)
    assert reg.declarations() == []
    reg.on_event("t", every="1h")(noop)
    reg.clear()
    assert reg.declarations() == []


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"cron": "61 * * * *"}, "cron", "minute field '61' is invalid; allowed: 0-59"),
        ({"cron": "* * * *"}, "cron", "has 4 fields; expected 5"),
        ({"cron": "H 3 * * *"}, "cron", "minute field 'H' is invalid"),
        ({"cron": "0 0 31 2 *"}, "cron", "never fires"),
        ({"cron": ""}, "cron", "non-empty string"),
        (
            {"cron": "0 3 * * *", "tz": "America/Springfield"},
            "tz",
            "'America/Springfield' is not a known IANA",
        ),
        ({"cron": "0 3 * * *", "tz": 5}, "tz", "IANA time zone name"),
        (
            {"cron": "0 3 * * *", "misfire": "sometimes"},
            "misfire",
            "one of coalesce, skip, all; got 'sometimes'",
        ),
        ({"cron": "0 3 * * *", "jitter": "1m"}, "jitter", "applies to every= schedules only"),
        ({"cron": "0 3 * * *", "every": "1h"}, "every", "cron= or every=, not both"),
        ({"every": "15x"}, "every", "every must be a timedelta, seconds, or a string like"),
        ({"every": "1h30"}, "every", "the number '30' has no unit"),
        ({"every": "-5m"}, "every", "every must be a duration >= 0"),
        ({"every": "500ms"}, "every", "every must be at least 1s; got '500ms'"),
        ({"every": [15]}, "every", "every must be a timedelta"),
        ({"every": "15m", "tz": "Europe/Berlin"}, "tz", "applies to cron= schedules only"),
        (
            {"every": "15m", "jitter": "16m"},
            "jitter",
            "at most the interval every='15m'; got '16m'",
        ),
        ({"every": "15m", "jitter": "soon"}, "jitter", "jitter must be a timedelta, seconds"),
        ({"every": "15m", "name": ""}, "name", "name must be a non-empty string"),
        ({"every": "15m", "name": "n" * 201}, "name", "at most 200 characters"),
        (
            {"every": "15m", "payload": {"x": float("nan")}},
            "payload",
            "payload must be JSON-serializable",
        ),
        ({"every": "15m", "payload": object()}, "payload", "payload must be JSON-serializable"),
        ({"tz": "UTC"}, "tz", "needs a schedule: give cron= or every= too"),
        ({"jitter": "1m"}, "jitter", "needs a schedule"),
        ({"misfire": "all"}, "misfire", "needs a schedule"),
    ],
)
def test_bad_trigger_arguments_are_refused_where_written(
    kwargs: dict[str, Any], field: str, message: str
) -> None:
    reg = ListenerRegistry()
    with pytest.raises(
        InvalidDeclaration, match=message.replace("(", r"\(").replace(")", r"\)")
    ) as info:
        reg.on_event("t", **kwargs)
    assert info.value.field == field and isinstance(info.value, ValueError)
    assert reg.declarations() == [] and reg.topics() == []


def test_interval_ticks_are_epoch_multiples_without_jitter() -> None:
    spec = parse_interval(900_000, 0, "n")
    assert next_fire(spec, 0) == 900_000
    assert next_fire(spec, 899_999) == 900_000 and next_fire(spec, 900_000) == 1_800_000
    assert (
        next_fire(spec, 1_800_000_000_123) == 1_800_000_900_000
    )  # a 15-minute boundary after 2027-01-15 08:00Z


def test_interval_jitter_is_deterministic_bounded_and_keeps_ticks_in_their_slot() -> None:
    spec = parse_interval(60_000, 20_000, "sync")
    offsets = [spec.offset(slot * 60_000) for slot in range(2000)]
    assert all(0 <= o < 20_000 for o in offsets)
    assert len(set(offsets)) > 1000  # spread, not constant
    assert offsets == [IntervalSpec(60_000, 20_000, "sync").offset(s * 60_000) for s in range(2000)]
    assert offsets != [
        parse_interval(60_000, 20_000, "other").offset(s * 60_000) for s in range(2000)
    ]
    ticks, cursor = [], 0
    for _ in range(500):
        cursor = next_fire(spec, cursor)
        ticks.append(cursor)
    assert [t // 60_000 for t in ticks] == list(range(len(ticks)))  # one tick per slot, in its slot
    full = parse_interval(60_000, 60_000, "full")  # jitter == interval: still one tick per slot
    cursor, slots = 0, []
    for _ in range(300):
        cursor = next_fire(full, cursor)
        slots.append(cursor // 60_000)
    assert slots == list(range(slots[0], slots[0] + 300))


def test_interval_misfire_modes_plan_like_cron() -> None:
    spec = parse_interval(60_000, 0, "n")
    assert plan_ticks(spec, 60_000, 300_000, "coalesce", 10, 1000) == ([60_000], 360_000)
    assert plan_ticks(spec, 60_000, 300_000, "all", 10, 1000) == (
        [60_000, 120_000, 180_000, 240_000, 300_000],
        360_000,
    )
    assert plan_ticks(spec, 60_000, 300_500, "skip", 10, 1000) == ([300_000], 360_000)


@pytest.mark.parametrize(
    ("every", "jitter", "field"),
    [(999, 0, "every"), (60_000, 60_001, "jitter"), (60_000, -1, "jitter")],
)
def test_a_stored_interval_out_of_bounds_is_refused(every: int, jitter: int, field: str) -> None:
    with pytest.raises(InvalidCron) as info:
        parse_interval(every, jitter, "n")
    assert info.value.field == field


def test_cron_info_says_how_it_ticks() -> None:
    base: dict[str, Any] = {
        "name": "n",
        "tz": "UTC",
        "topic": "t",
        "next_run_at": None,
        "paused": False,
        "last_run_at": None,
    }
    assert CronInfo(cron="0 3 * * *", **base).trigger == "0 3 * * *"
    assert CronInfo(cron="", every=timedelta(minutes=15), **base).trigger == "every 15m"
    assert (
        CronInfo(
            cron="", every=timedelta(hours=1, minutes=30), jitter=timedelta(seconds=90), **base
        ).trigger
        == "every 1h30m, jitter up to 1m30s"
    )
