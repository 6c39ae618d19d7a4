"""Listeners: `@on_event(topic)` registration, event types, and the dispatch of
one event to its listeners. Imports nothing else of horae."""

from listeners.dispatch import (
    DispatchResult,
    ListenerFailure,
    call_listener,
    dispatch,
    qualified_name,
)
from listeners.events import ScheduleArrivedEvent, ScheduleFailedEvent
from listeners.registry import Listener, ListenerRegistry, default_registry, on_event

__all__ = [
    "call_listener",
    "DispatchResult",
    "Listener",
    "ListenerFailure",
    "ListenerRegistry",
    "ScheduleArrivedEvent",
    "ScheduleFailedEvent",
    "default_registry",
    "dispatch",
    "on_event",
    "qualified_name",
]
