"""Payload schemas in the listener registry: one schema per topic, a pydantic model
or a callable, and the description of a refused payload (field path, value, rule)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from listeners import ListenerRegistry, PayloadRejected, parse_payload


class Email(BaseModel):
    to: str
    attempts: int = 1


class Other(BaseModel):
    x: int


async def listener(event: Any) -> None:
    return None


async def second(event: Any) -> None:
    return None


def test_a_model_schema_parses_into_the_model() -> None:
    reg = ListenerRegistry()
    reg.on_event("email.send", schema=Email)(listener)
    validate = reg.validator("email.send")
    assert validate is not None and reg.schema("email.send") is Email
    assert parse_payload(validate, {"to": "a@b.c"}) == Email(to="a@b.c")
    assert reg.validator("other") is None and reg.schema("other") is None


def test_a_callable_schema_is_used_as_it_is() -> None:
    def positive(payload: Any) -> int:
        if not isinstance(payload, int) or payload <= 0:
            raise ValueError(f"must be a positive integer, not {payload!r}")
        return payload

    reg = ListenerRegistry()
    reg.add("count", listener, positive)
    assert reg.validator("count") is positive
    assert parse_payload(positive, 3) == 3
    with pytest.raises(PayloadRejected, match=r"^payload: must be a positive integer, not -1$"):
        parse_payload(positive, -1)


def test_one_schema_per_topic() -> None:
    reg = ListenerRegistry()
    reg.on_event("email.send", schema=Email)(listener)
    reg.on_event("email.send", schema=Email)(second)  # the same schema again: fine
    reg.on_event("email.send")(second)  # no schema: the topic's applies
    with pytest.raises(ValueError, match="already has payload schema .*Email.*registers .*Other"):
        reg.on_event("email.send", schema=Other)(listener)
    assert reg.schema("email.send") is Email and len(reg.listeners("email.send")) == 2


def test_the_schema_goes_with_the_last_listener() -> None:
    reg = ListenerRegistry()
    reg.on_event("email.send", schema=Email)(listener)
    reg.on_event("email.send")(second)
    reg.remove("email.send", listener)
    assert reg.schema("email.send") is Email
    reg.remove("email.send", second)
    assert reg.schema("email.send") is None
    reg.on_event("email.send", schema=Other)(listener)
    assert reg.schema("email.send") is Other
    reg.clear()
    assert reg.schema("email.send") is None


def test_a_schema_that_is_not_callable_is_refused_at_registration() -> None:
    with pytest.raises(TypeError, match="pydantic model class or a callable"):
        ListenerRegistry().on_event("t", schema=42)


def test_a_refusal_names_the_field_path_the_value_and_the_rule() -> None:
    class Order(BaseModel):
        items: list[Email]

    with pytest.raises(PayloadRejected) as caught:
        parse_payload(Order.model_validate, {"items": [{"to": "a"}, {"to": 5, "attempts": "many"}]})
    message = str(caught.value)
    assert message.startswith("payload.items[1].to: Input should be a valid string (got 5)")
    assert (
        "payload.items[1].attempts: Input should be a valid integer" in message
        and "(got 'many')" in message
    )
    assert type(caught.value.cause).__name__ == "ValidationError"


def test_a_missing_field_is_named_without_the_whole_object() -> None:
    with pytest.raises(PayloadRejected, match=r"^payload\.to: Field required$"):
        parse_payload(Email.model_validate, {"attempts": 2})


def test_other_exceptions_of_a_validator_propagate() -> None:
    def broken(payload: Any) -> Any:
        raise KeyError("lookup")

    with pytest.raises(KeyError):
        parse_payload(broken, {})
