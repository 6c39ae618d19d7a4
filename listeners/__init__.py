"""Listeners: `@on_event(topic, schema=..., cron=... | every=...)` registration, payload
schemas, schedules declared beside listeners, event types, and the dispatch of one event
to its listeners. Imports nothing else of horae."""

from listeners.dispatch import (
    DispatchResult,
    ListenerFailure,
    call_listener,
    dispatch,
    qualified_name,
)
from listeners.events import Reporter, ScheduleArrivedEvent, ScheduleFailedEvent
from listeners.executors import EXECUTORS, Executor, UnimportableListener
from listeners.registry import Listener, ListenerRegistry, default_registry, on_event
from listeners.schema import PayloadRejected, Schema, Validator, parse_payload
from listeners.triggers import Declaration, InvalidDeclaration

__all__ = [
    "call_listener",
    "Declaration",
    "DispatchResult",
    "EXECUTORS",
    "Executor",
    "InvalidDeclaration",
    "Listener",
    "ListenerFailure",
    "ListenerRegistry",
    "PayloadRejected",
    "Reporter",
    "ScheduleArrivedEvent",
    "ScheduleFailedEvent",
    "Schema",
    "UnimportableListener",
    "Validator",
    "default_registry",
    "dispatch",
    "on_event",
    "parse_payload",
    "qualified_name",
]
