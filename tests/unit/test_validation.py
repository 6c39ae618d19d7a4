"""Input checks of the scheduling API: each bad field raises the error named for it."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import InvalidJobId, InvalidPayload, InvalidTopic, RetryPolicy, ScheduleError
from scheduler.core.request import JobRequest
from scheduler.core.validation import MAX_ID_LEN, build_job, check_job_id, check_topic

DEFAULTS: dict[str, Any] = {"default_retry": RetryPolicy(), "default_timeout_ms": 60_000}


def job(**overrides: Any) -> Any:
    args: dict[str, Any] = {
        "topic": "t",
        "run_at_ms": 5_000,
        "tz": "UTC",
        "payload": None,
        "retry": None,
        "metadata": None,
        "timeout": None,
        "job_id": None,
        "cron": "",
        **overrides,
    }
    return build_job(JobRequest(**args), **DEFAULTS, now_ms=1_000)


@pytest.mark.parametrize("bad", ["", "x" * (MAX_ID_LEN + 1), 42])
def test_an_invalid_job_id_raises_invalid_job_id_naming_the_field(bad: object) -> None:
    with pytest.raises(InvalidJobId) as info:
        job(job_id=bad)
    assert info.value.field == "job_id" and info.value.code == "SCHEDULE_JOB_ID_INVALID"
    assert isinstance(info.value, ScheduleError) and not isinstance(info.value, InvalidTopic)


def test_a_given_job_id_is_kept_and_none_generates_one() -> None:
    assert check_job_id("order-1") == "order-1" and job(job_id="order-1").id == "order-1"
    assert check_job_id(None) is None and len(job().id) == 16


def test_the_terminal_failure_topic_is_reserved() -> None:
    with pytest.raises(InvalidTopic):
        check_topic("schedule.failed")


def test_metadata_must_be_a_mapping_with_string_keys() -> None:
    for bad in (["a"], {1: "x"}):
        with pytest.raises(InvalidPayload) as info:
            job(metadata=bad)
        assert info.value.field == "metadata"


def test_a_past_run_at_is_due_now_and_defaults_fill_in() -> None:
    built = job(run_at_ms=500, payload={"a": 1}, metadata={"k": "v"})
    assert (built.due_ms, built.run_at_ms) == (1_000, 500)
    assert (built.payload_json, built.metadata_json) == ('{"a":1}', '{"k":"v"}')
    assert (built.max_attempts, built.timeout_ms) == (5, 60_000)
