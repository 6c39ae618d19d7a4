"""Payload schemas: a pydantic model class or any callable `payload -> parsed` that
raises on invalid input, and the one description of a refused payload (field path,
value, what is allowed). Pydantic is never imported here: a model is recognised by
its `model_validate`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Schema = Any  # a pydantic BaseModel subclass, or a callable payload -> parsed
Validator = Callable[[Any], Any]

_MAX_VALUE_REPR = 120


class PayloadRejected(ValueError):
    """A payload its topic's schema refused; str() names the field path, the value and
    what is allowed, and `cause` is the validator's own exception."""

    def __init__(self, message: str, cause: BaseException) -> None:
        super().__init__(message)
        self.cause = cause


def validator_of(schema: Schema) -> Validator:
    """The function that validates and parses a payload for `schema`.

    Raises:
        TypeError: `schema` is neither a model class nor callable.
    """
    validate = getattr(schema, "model_validate", None)
    if isinstance(schema, type) and callable(validate):
        return validate  # type: ignore[no-any-return]
    if callable(schema):
        return schema  # type: ignore[no-any-return]
    raise TypeError(f"schema must be a pydantic model class or a callable; got {schema!r}")


def parse_payload(validate: Validator, payload: Any, root: str = "payload") -> Any:
    """`payload` parsed by `validate` (a model instance for a model schema).

    Raises:
        PayloadRejected: the validator raised ValueError or TypeError (pydantic's
            ValidationError is a ValueError); any other exception propagates as it is.
    """
    try:
        return validate(payload)
    except (ValueError, TypeError) as exc:
        raise PayloadRejected(describe(exc, root), exc) from exc


def describe(exc: BaseException, root: str = "payload") -> str:
    """One line per refusal: `payload.to: <what is allowed> (got <value>)`, from pydantic's
    error list when the exception has one, else `payload: <message>`."""
    errors = getattr(exc, "errors", None)
    items: Any = None
    if callable(errors):
        try:
            items = errors(include_url=False)
        except TypeError:
            items = None
    if not isinstance(items, list) or not items:
        return f"{root}: {exc}"
    parts = []
    for item in items:
        path = field_path(root, item.get("loc", ()))
        got = "" if item.get("type") == "missing" else f" (got {_short_repr(item.get('input'))})"
        parts.append(f"{path}: {item.get('msg', 'invalid')}{got}")
    return "; ".join(parts)


def field_path(root: str, loc: Sequence[Any]) -> str:
    """`payload.items[0].sku` for pydantic's loc ("items", 0, "sku")."""
    path = root
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_VALUE_REPR else text[: _MAX_VALUE_REPR - 3] + "..."
