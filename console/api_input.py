"""What the API takes, as its OpenAPI document states it: the request members' types with
the bounds the engine checks (so a value no job can have is a 422 naming it, and the
document tells clients), and the one 422 for a rule the document cannot state."""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Body, HTTPException, Query
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from console.data import STATES
from scheduler.core.dependencies import MAX_PARENTS
from scheduler.core.outbox import SCHEDULE_FAILED_TOPIC
from scheduler.core.validation import MAX_ID_LEN, MAX_JSON_BYTES, MAX_JSON_DEPTH, MAX_TOPIC_LEN
from scheduler.core.validation import MAX_KEY_LEN as MAX_KEY_LEN  # (re-exported: console.api)


class FieldInvalid(HTTPException):
    """A 422 about one member of the request that its schema cannot express (two members
    that exclude each other, say); the error names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(422, f"{field}: {message}")
        self.field = field


class ActionIn(BaseModel):
    """An action's body: an empty JSON object (`{}`); an empty body with the JSON content
    type is taken as one."""

    model_config = ConfigDict(extra="forbid")


# The body of cancel, retry, delete and a schedule's actions: required in the document (a
# client sends `{}`), tolerated when empty (the Content-Type check is what guards them).
NoBody = Annotated[ActionIn, Body()]
ACTION_BODY: dict[str, Any] = {"requestBody": {"required": True}}


def iso_text(value: Any) -> Any:
    """A date-time comes as ISO 8601 text, never as a number (pydantic would take one as
    seconds since the epoch, which the document does not say)."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise ValueError(
            "an ISO 8601 date-time as text is required, like 2030-01-01T09:00:00+01:00"
        )
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            "an ISO 8601 date-time is required, like 2030-01-01T09:00:00+01:00"
        ) from None


Instant = Annotated[datetime, BeforeValidator(iso_text)]


def json_int(value: Any) -> Any:
    """A JSON integer: 3 or 3.0 (JSON Schema counts both), never true or "3" (pydantic would
    take those as 1 and 3)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("a JSON integer is required")
    return int(value) if isinstance(value, float) and value.is_integer() else value


Whole = BeforeValidator(json_int)  # after the Field bounds, or the document loses them
# A text PostgreSQL and the engine can store: no NUL; a topic has a non-blank character.
STORABLE = r"^[^\x00]*$"
NAME = r"^[^\x00]*[^\s\x00][^\x00]*$"
JSON_LIMITS = (
    f"any JSON, at most [limits] json_bytes as JSON ({MAX_JSON_BYTES // 1024} KiB by default) "
    f"and {MAX_JSON_DEPTH} levels "
    "of arrays and objects deep, without NUL or an unpaired surrogate in its strings (a 400 naming "
    "the member)"
)

MAX_PAYLOAD_MATCH = 500  # (data.PayloadMatch's bound)
# Checked by the scheduler (a 400 naming `state`); the document lists the values.
StateQuery = Annotated[str | None, Query(json_schema_extra={"enum": list(STATES)})]
# The bounds of ScheduleIn's topic and key: a value no job can have is a bad request.
TopicQuery = Annotated[str | None, Query(min_length=1, max_length=MAX_TOPIC_LEN, pattern=NAME)]
KeyQuery = Annotated[str | None, Query(min_length=1, max_length=MAX_KEY_LEN, pattern=STORABLE)]
IdPrefixQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_ID_LEN,
        pattern=NAME,
        description="the jobs whose id starts with this text (from the audit trail's index)",
    ),
]
PayloadQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_PAYLOAD_MATCH,
        pattern=r"^[^\x00=]+=[^\x00]*$",
        description="field=value: the jobs whose payload holds the value at the field (nested "
        "fields joined by dots, like order.status=paid; the value as JSON, or a string's text)",
    ),
]
CursorQuery = Annotated[
    str | None, Query(min_length=1, description="`cursor` of the previous page")
]

# A duration as the library writes it (listeners/durations.py): number+unit parts, units d h m s
# ms, ASCII digits and spaces only (the document's pattern is exactly what is taken). The order
# of the units (largest first, each once) and the bounds of a text are the engine's check (a 400
# naming the field); a number is seconds, bounded here.
DURATION_TEXT = r"^ *[0-9]+(?:\.[0-9]+)? *(?:ms|[dhms])(?: *[0-9]+(?:\.[0-9]+)? *(?:ms|[dhms]))* *$"
_DURATION = re.compile(DURATION_TEXT)
MAX_DURATION_TEXT = 64
MAX_DELAY_S = 10 * 365 * 86_400
MAX_TIMEOUT_S = 30 * 86_400


def _duration(lowest: float, above: bool, highest: float) -> Any:
    """A before-validator taking seconds (a JSON number within the bounds) or duration text."""
    floor = f"> {lowest:g}" if above else f">= {lowest:g}"

    def check(value: Any) -> Any:
        if isinstance(value, str):
            if len(value) > MAX_DURATION_TEXT or not _DURATION.match(value):
                raise ValueError(
                    "a duration is required: seconds as a number, or text like '90s', '2m30s', "
                    "'1h30m', '1d12h' or '500ms' (units d, h, m, s, ms, largest first)"
                )
            return value
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise ValueError("a duration is required: seconds as a number, or text like '1h30m'")
        if not (value > lowest if above else value >= lowest) or value > highest:
            raise ValueError(f"seconds must be {floor} and at most {highest:g}")
        return float(value)

    return check


def _duration_schema(lowest: float, above: bool, highest: float) -> dict[str, Any]:
    number: dict[str, Any] = {
        "type": "number",
        "maximum": highest,
        ("exclusiveMinimum" if above else "minimum"): lowest,
    }
    return {
        "anyOf": [
            {"type": "string", "pattern": DURATION_TEXT, "maxLength": MAX_DURATION_TEXT},
            number,
        ],
        "description": (
            "seconds (a number) or text as the library takes it: '2s', '1h30m', '1d12h', '500ms'"
        ),
    }


DelayIn = Annotated[
    float | str,
    BeforeValidator(_duration(0, False, MAX_DELAY_S)),
    WithJsonSchema(_duration_schema(0, False, MAX_DELAY_S)),
]
TimeoutIn = Annotated[
    float | str,
    BeforeValidator(_duration(0, True, MAX_TIMEOUT_S)),
    WithJsonSchema(_duration_schema(0, True, MAX_TIMEOUT_S)),
]


def exclusive(*pairs: tuple[str, str, str, str]) -> dict[str, Any]:
    """The document's statement that two members are not given together: (name, JSON type, name,
    JSON type) per pair (a null member counts as absent)."""

    def kind(t: str) -> dict[str, Any]:
        return {"type": t.split("|")} if "|" in t else {"type": t}

    return {
        "allOf": [
            {"not": {"required": [a, b], "properties": {a: kind(ta), b: kind(tb)}}}
            for a, ta, b, tb in pairs
        ]
    }


class ScheduleIn(BaseModel):
    """A job to schedule: `run_at` (ISO 8601; without an offset it is wall-clock time in
    `tz`) or `delay` (from now: seconds, or text like "2s", "1h30m"; `delay_s`: seconds),
    only one of them; none means now. `timeout` (or `timeout_s`) bounds each attempt."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=exclusive(
            ("run_at", "string", "delay_s", "number"),
            ("run_at", "string", "delay", "string|number"),
            ("delay", "string|number", "delay_s", "number"),
            ("timeout", "string|number", "timeout_s", "number"),
        ),
    )
    topic: str = Field(
        min_length=1,
        max_length=MAX_TOPIC_LEN,
        pattern=NAME,
        json_schema_extra={"not": {"const": SCHEDULE_FAILED_TOPIC}},
    )  # reserved
    run_at: Instant | None = None
    delay: DelayIn | None = None
    delay_s: float | None = Field(None, ge=0, le=MAX_DELAY_S, strict=True)
    tz: str = Field("UTC", min_length=1, max_length=64)
    payload: Any = Field(None, description=JSON_LIMITS)
    metadata: dict[str, Any] | None = Field(None, description=JSON_LIMITS)
    attempts: Annotated[int, Field(ge=1, le=20), Whole] | None = None
    timeout: TimeoutIn | None = None
    timeout_s: float | None = Field(None, gt=0, le=30 * 86_400, strict=True)
    key: str | None = Field(None, min_length=1, max_length=MAX_KEY_LEN, pattern=STORABLE)
    priority: Annotated[int, Field(ge=-1000, le=1000), Whole] | None = None
    job_id: str | None = Field(None, min_length=1, max_length=MAX_ID_LEN, pattern=STORABLE)
    after: list[Annotated[str, Field(min_length=1, max_length=MAX_ID_LEN)]] | None = Field(
        None,
        max_length=MAX_PARENTS,
        description="ids of jobs that must complete first (docs/how-to/dependencies.md): the "
        "job waits in state waiting_for_parents; an unknown id is refused",
    )
    on_parent_failure: Literal["fail", "ignore", "cancel"] | None = Field(
        None, description="what a parent failing (or cancelled, deleted) does: default fail"
    )


class RescheduleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_at: Instant
    tz: str = Field("UTC", min_length=1, max_length=64)
