"""JobRequest: one frozen, keyword-only record of a scheduling call, checked by build_job."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from scheduler import Dedupe, InvalidTopic, RetryPolicy, ScheduleError
from scheduler.core.request import JobRequest
from scheduler.core.validation import build_job

DEFAULTS: dict[str, Any] = {"default_retry": RetryPolicy(), "default_timeout_ms": 60_000}


def test_a_request_is_frozen_and_keyword_only() -> None:
    request = JobRequest(topic="t")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.topic = "u"  # type: ignore[misc]
    with pytest.raises(TypeError):
        JobRequest("t")  # type: ignore[misc]


def test_omitted_fields_mean_what_schedule_at_omits() -> None:
    job = build_job(JobRequest(topic="t"), **DEFAULTS, now_ms=1_000)
    assert (job.run_at_ms, job.due_ms, job.tz, job.cron, job.dead_letter) == (
        0,
        1_000,
        "UTC",
        "",
        "",
    )
    assert (job.key, job.priority, job.dedupe_key) == ("", "", "")
    assert not job.retry_given and not job.timeout_given and job.payload_json == "null"


def test_every_field_reaches_the_job() -> None:
    request = JobRequest(
        topic="t",
        run_at_ms=5_000,
        tz="Europe/Paris",
        payload={"a": 1},
        retry={"attempts": 7},
        metadata={"m": "x"},
        timeout="2m",
        job_id="j-1",
        cron="nightly",
        dead_letter="t.dead",
        key="k",
        dedupe=Dedupe("d", window=60),
        priority="high",
    )
    job = build_job(request, **DEFAULTS, now_ms=1_000)
    assert (job.id, job.topic, job.due_ms, job.run_at_ms, job.tz) == (
        "j-1",
        "t",
        5_000,
        5_000,
        "Europe/Paris",
    )
    assert (job.payload_json, job.metadata_json, job.max_attempts, job.timeout_ms) == (
        '{"a":1}',
        '{"m":"x"}',
        7,
        120_000,
    )
    assert (job.cron, job.dead_letter, job.key, job.dedupe_key, job.dedupe_window_ms) == (
        "nightly",
        "t.dead",
        "k",
        "d",
        "60000",
    )
    assert job.priority != "" and job.retry_given and job.timeout_given


def test_raw_values_stay_raw_until_validation_names_them() -> None:
    request = JobRequest(topic=None, retry="three")
    assert request.topic is None and request.retry == "three"
    with pytest.raises(InvalidTopic) as info:
        build_job(request, **DEFAULTS)
    assert info.value.field == "topic" and "got None" in str(info.value)


def test_a_dead_letter_is_checked_after_every_other_field() -> None:
    with pytest.raises(InvalidTopic) as info:
        build_job(JobRequest(topic="t", dead_letter="t"), **DEFAULTS)
    assert info.value.field == "dead_letter"
    with pytest.raises(ScheduleError) as bad_payload:
        build_job(JobRequest(topic="t", dead_letter="t", payload=float("nan")), **DEFAULTS)
    assert bad_payload.value.field == "payload"
