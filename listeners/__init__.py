"""Listeners: `@on_event(topic)` registration, event types, and the dispatch of
one event to its listeners. Imports nothing else of horae."""

from listeners.dispatch import (
    DispatchResult,
    ListenerFailure,
    call_listener,
    describe_error,
    dispatch,
    qualified_name,
)
from listeners.events import SCHEDULE_FAILED_TOPIC, ScheduleArrivedEvent, ScheduleFailedEvent
from listeners.registry import Listener, ListenerRegistry, default_registry, on_event

__all__ = [
    "SCHEDULE_FAILED_TOPIC",
    "call_listener",
    "DispatchResult",
    "Listener",
    "ListenerFailure",
    "ListenerRegistry",
    "ScheduleArrivedEvent",
    "ScheduleFailedEvent",
    "default_registry",
    "describe_error",
    "dispatch",
    "on_event",
    "qualified_name",
]
