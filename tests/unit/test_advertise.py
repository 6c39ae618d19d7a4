"""Which topics a worker claims and advertises, and reading the worker registry."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from scheduler.core.errors import ConfigError, ScheduleError
from scheduler.core.outbox import SCHEDULE_FAILED_TOPIC
from scheduler.worker.advertise import ClaimFilter, check_worker_id, entry_json, live_workers

LISTENED = ["b", SCHEDULE_FAILED_TOPIC, "a"]


def test_by_default_a_worker_claims_its_listeners_topics_plus_unserved_ones() -> None:
    f = ClaimFilter.of(LISTENED, None, False)
    assert f == ClaimFilter(("a", "b"), True, False, ("a", "b"))
    assert f.advertised(LISTENED) == ("a", "b")


def test_explicit_topics_are_exactly_those() -> None:
    f = ClaimFilter.of(LISTENED, ["x", "y", "x"], False)
    assert f == ClaimFilter(("x", "y"), False, False, ())
    assert ClaimFilter.of(LISTENED, ["b", "x"], False).listened == (
        "b",
    )  # dead letters: only with a listener
    assert f.advertised(LISTENED) == ("x", "y")


def test_all_topics_claims_everything_and_advertises_what_it_listens_to() -> None:
    f = ClaimFilter.of(LISTENED, None, True)
    assert f == ClaimFilter((), False, True, ("a", "b"))
    assert f.advertised(LISTENED) == ("a", "b")
    with pytest.raises(ConfigError):
        ClaimFilter.of(LISTENED, ["x"], True)


def test_no_listeners_leaves_no_own_topic() -> None:
    assert ClaimFilter.of([SCHEDULE_FAILED_TOPIC], None, False) == ClaimFilter((), True, False, ())


def test_live_workers_reads_entries_younger_than_their_ttl() -> None:
    now = 1_800_000_000_000
    entries = {
        "w2": entry_json(["a"], 4, 2, False, 12, now - 100, 1_000, host="h2"),
        "w1": entry_json([], 10, 0, True, 11, now - 999, 1_000, host="h1"),
        "dead": entry_json(["a"], 4, 0, False, 13, now - 1_000, 1_000, host="h3"),
        "junk": "{not json",
        "partial": json.dumps({"host": "h"}),
    }
    infos = live_workers(entries, now)
    assert [
        (i.id, i.host, i.pid, i.topics, i.concurrency, i.running, i.all_topics) for i in infos
    ] == [
        ("w1", "h1", 11, (), 10, 0, True),
        ("w2", "h2", 12, ("a",), 4, 2, False),
    ]
    assert infos[1].last_heartbeat == datetime.fromtimestamp((now - 100) / 1000, UTC)


def test_a_worker_is_draining_once_asked_or_stopping_and_its_entry_ends_in_a_brace() -> None:
    now = 1_800_000_000_000
    plain = entry_json(["a"], 4, 1, False, 12, now, 1_000, host="h")
    stopping = entry_json(["a"], 4, 1, False, 12, now, 1_000, host="h", stopping=True)
    assert (
        plain.endswith("}") and "stopping" not in plain and json.loads(stopping)["stopping"] is True
    )
    asked = plain[:-1] + f',"drain_ms":{now - 5}}}'  # (as lua/request_drain.lua appends it)
    infos = {i.id: i for i in live_workers({"run": plain, "stop": stopping, "asked": asked}, now)}
    assert {k: (i.state, i.draining) for k, i in infos.items()} == {
        "run": ("running", False),
        "stop": ("draining", True),
        "asked": ("draining", True),
    }
    assert infos["asked"].drain_requested_at == datetime.fromtimestamp((now - 5) / 1000, UTC)
    assert infos["run"].drain_requested_at is None and infos["stop"].drain_requested_at is None


@pytest.mark.parametrize("odd", ["  ", "a\x00b", "\x85", "w/1"])
def test_any_other_string_is_an_id_to_look_up(odd: str) -> None:
    """Like a job id: a string no live worker has is not found (404), not a bad request."""
    assert check_worker_id(odd) == odd


@pytest.mark.parametrize("bad", [None, 5, "", ["w"]])
def test_a_worker_id_that_is_no_usable_string_is_refused_by_name(bad: object) -> None:
    with pytest.raises(ScheduleError) as caught:
        check_worker_id(bad)
    assert caught.value.field == "worker_id" and "worker_id" in str(caught.value)
