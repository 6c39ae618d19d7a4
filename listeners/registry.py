"""Which listeners run for which topic, and the payload schema of a topic. `on_event`
is bound to one default registry (the decorator users asked for); every consumer
also accepts its own."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, Union

from listeners.schema import Schema, Validator, validator_of

Listener = Callable[[Any], Union[Awaitable[None], None]]
F = TypeVar("F", bound=Listener)


class ListenerRegistry:
    """Topic → listeners, in registration order, and topic → payload schema.

    A topic has at most one schema: every listener of the topic receives the same
    parsed payload, so a listener registering a different schema is refused.
    """

    def __init__(self) -> None:
        self._by_topic: dict[str, list[Listener]] = {}
        self._schemas: dict[str, tuple[Schema, Validator]] = {}

    def on_event(self, topic: str, schema: Schema | None = None) -> Callable[[F], F]:
        """Decorator: run the function for every event of `topic` (async or sync).

        Args:
            topic: the topic to listen to.
            schema: the payload's schema: a pydantic model class (the listener gets the
                model instance as event.payload) or a callable payload -> parsed that
                raises ValueError/TypeError on invalid input. Scheduling checks it where
                it is known, and a worker completes a job whose payload it refuses as
                `invalid_payload`, without retrying and without running listeners.

        Raises:
            ValueError: an empty topic, or a schema other than the topic's registered one.
            TypeError: a schema that is neither a model class nor callable.
        """
        if not isinstance(topic, str) or not topic.strip():
            raise ValueError(f"topic must be a non-empty string, got {topic!r}")
        if schema is not None:
            validator_of(schema)  # refuse a bad schema where it is written, not at first use

        def register(fn: F) -> F:
            self.add(topic, fn, schema)
            return fn

        return register

    def add(self, topic: str, fn: Listener, schema: Schema | None = None) -> None:
        """Register `fn` for `topic`; registering the same function twice is a no-op.

        Raises:
            ValueError: `schema` differs from the one the topic already has.
            TypeError: a schema that is neither a model class nor callable.
        """
        if schema is not None:
            known = self._schemas.get(topic)
            if known is not None and known[0] is not schema:
                raise ValueError(f"topic {topic!r} already has payload schema {known[0]!r}; "
                                 f"listener {fn!r} registers {schema!r} (one schema per topic)")
            if known is None:
                self._schemas[topic] = (schema, validator_of(schema))
        listeners = self._by_topic.setdefault(topic, [])
        if fn not in listeners:
            listeners.append(fn)

    def remove(self, topic: str, fn: Listener) -> None:
        """Unregister `fn` from `topic` (no error when absent); the topic's schema goes
        with its last listener."""
        listeners = self._by_topic.get(topic, [])
        if fn in listeners:
            listeners.remove(fn)
        if not listeners:
            self._schemas.pop(topic, None)

    def schema(self, topic: str) -> Schema | None:
        """The payload schema registered for `topic`, or None."""
        known = self._schemas.get(topic)
        return None if known is None else known[0]

    def validator(self, topic: str) -> Validator | None:
        """The function that validates and parses a payload of `topic`, or None without a schema."""
        known = self._schemas.get(topic)
        return None if known is None else known[1]

    def listeners(self, topic: str) -> tuple[Listener, ...]:
        """The listeners of `topic` (empty when none)."""
        return tuple(self._by_topic.get(topic, ()))

    def topics(self) -> list[str]:
        """Every topic with at least one listener."""
        return [t for t, fns in self._by_topic.items() if fns]

    def clear(self) -> None:
        """Forget every listener and schema (tests)."""
        self._by_topic.clear()
        self._schemas.clear()


default_registry = ListenerRegistry()


def on_event(topic: str, schema: Schema | None = None) -> Callable[[F], F]:
    """Register a listener for `topic` in the default registry (schema: see
    ListenerRegistry.on_event)."""
    return default_registry.on_event(topic, schema)
