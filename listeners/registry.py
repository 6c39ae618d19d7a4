"""Which listeners run for which topic. `on_event` is bound to one default
registry (the decorator users asked for); every consumer also accepts its own."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, Union

Listener = Callable[[Any], Union[Awaitable[None], None]]
F = TypeVar("F", bound=Listener)


class ListenerRegistry:
    """Topic → listeners, in registration order."""

    def __init__(self) -> None:
        self._by_topic: dict[str, list[Listener]] = {}

    def on_event(self, topic: str) -> Callable[[F], F]:
        """Decorator: run the function for every event of `topic` (async or sync)."""
        if not isinstance(topic, str) or not topic.strip():
            raise ValueError(f"topic must be a non-empty string, got {topic!r}")

        def register(fn: F) -> F:
            self.add(topic, fn)
            return fn

        return register

    def add(self, topic: str, fn: Listener) -> None:
        """Register `fn` for `topic`; registering the same function twice is a no-op."""
        listeners = self._by_topic.setdefault(topic, [])
        if fn not in listeners:
            listeners.append(fn)

    def remove(self, topic: str, fn: Listener) -> None:
        """Unregister `fn` from `topic` (no error when absent)."""
        listeners = self._by_topic.get(topic, [])
        if fn in listeners:
            listeners.remove(fn)

    def listeners(self, topic: str) -> tuple[Listener, ...]:
        """The listeners of `topic` (empty when none)."""
        return tuple(self._by_topic.get(topic, ()))

    def topics(self) -> list[str]:
        """Every topic with at least one listener."""
        return [t for t, fns in self._by_topic.items() if fns]

    def clear(self) -> None:
        """Forget every listener (tests)."""
        self._by_topic.clear()


default_registry = ListenerRegistry()


def on_event(topic: str) -> Callable[[F], F]:
    """Register a listener for `topic` in the default registry."""
    return default_registry.on_event(topic)
