"""Scheduling checks a payload against its topic's schema (when the process knows
one) as the worker will see it: refused with InvalidPayload naming the field."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from scheduler import InvalidPayload, RetryPolicy
from scheduler.core.request import JobRequest
from scheduler.core.validation import build_job

DEFAULTS: dict[str, Any] = {"default_retry": RetryPolicy(), "default_timeout_ms": 60_000}


class Email(BaseModel):
    to: str
    subject: str = ""


def job(payload: Any, validate: Any) -> Any:
    return build_job(
        JobRequest(topic="email.send", run_at_ms=5_000, payload=payload),
        **DEFAULTS,
        now_ms=1_000,
        validate=validate,
    )


def test_a_valid_payload_is_stored_as_given() -> None:
    assert job({"to": "a@b.c"}, Email.model_validate).payload_json == '{"to":"a@b.c"}'


def test_an_invalid_payload_raises_naming_the_field_path_and_value() -> None:
    with pytest.raises(InvalidPayload) as info:
        job({"to": ["x"]}, Email.model_validate)
    assert info.value.field == "payload" and info.value.code == "SCHEDULE_PAYLOAD_INVALID"
    assert "payload.to: Input should be a valid string (got ['x'])" in str(info.value)


def test_without_a_schema_nothing_is_checked() -> None:
    assert job({"to": ["x"]}, None).payload_json == '{"to":["x"]}'


def test_the_schema_sees_the_json_value_not_the_python_one() -> None:
    seen: list[Any] = []

    def record(payload: Any) -> Any:
        seen.append(payload)
        return payload

    job({"at": (1, 2)}, record)
    assert seen == [{"at": [1, 2]}], "a tuple reaches the worker as a list"
    with pytest.raises(InvalidPayload, match="JSON-serializable"):
        job({"at": datetime(2027, 1, 1, tzinfo=UTC)}, record)
