"""What the API takes, as its OpenAPI document states it: the request members' types with
the bounds the engine checks (so a value no job can have is a 422 naming it, and the
document tells clients), and the one 422 for a rule the document cannot state."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Body, HTTPException, Query
from pydantic import BaseModel, BeforeValidator, ConfigDict

from console.data import STATES
from scheduler.validation import MAX_JSON_DEPTH, MAX_TOPIC_LEN


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
        raise ValueError("an ISO 8601 date-time as text is required, like 2030-01-01T09:00:00+01:00")
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("an ISO 8601 date-time is required, like 2030-01-01T09:00:00+01:00") from None


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
MAX_KEY_LEN = 512
JSON_LIMITS = (f"any JSON, at most [limits] json_bytes as JSON (512 KiB by default) and {MAX_JSON_DEPTH} levels "
               "of arrays and objects deep, without NUL or an unpaired surrogate in its strings (a 400 naming "
               "the member)")

# Checked by the scheduler (a 400 naming `state`); the document lists the values.
StateQuery = Annotated[str | None, Query(json_schema_extra={"enum": list(STATES)})]
# The bounds of ScheduleIn's topic and key: a value no job can have is a bad request.
TopicQuery = Annotated[str | None, Query(min_length=1, max_length=MAX_TOPIC_LEN, pattern=NAME)]
KeyQuery = Annotated[str | None, Query(min_length=1, max_length=MAX_KEY_LEN, pattern=STORABLE)]
CursorQuery = Annotated[str | None, Query(min_length=1, description="`cursor` of the previous page")]
