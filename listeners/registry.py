"""Which listeners run for which topic, the payload schema of a topic, and the schedules
declared beside listeners (`@on_event(topic, cron=...)`). `on_event` is bound to one
default registry (the decorator users asked for); every consumer also accepts its own."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, TypeVar

from listeners.executors import Executor, check_executor
from listeners.schema import Schema, Validator, validator_of
from listeners.triggers import Declaration, InvalidDeclaration, declaration

Duration = timedelta | float | str

# A listener may return a JSON value: the job's result (JobInfo.result); None stores nothing.
Listener = Callable[[Any], Any]
F = TypeVar("F", bound=Listener)

# Every listener of a topic runs for each of its events, all at once: a topic with hundreds
# is a registration bug (a decorator in a loop), not a design. ListenerRegistry(max_per_topic=).
MAX_LISTENERS_PER_TOPIC = 100


class ListenerRegistry:
    """Topic → listeners, in registration order, topic → payload schema, and schedule
    name → declared schedule with the listeners that declare it.

    A topic has at most one schema: every listener of the topic receives the same
    parsed payload, so a listener registering a different schema is refused. A schedule
    name has one declaration: listeners may repeat it, a different one is refused.
    """

    def __init__(self, max_per_topic: int = MAX_LISTENERS_PER_TOPIC) -> None:
        if max_per_topic < 1:
            raise ValueError(f"max_per_topic must be at least 1, got {max_per_topic}")
        self.max_per_topic = max_per_topic
        self._by_topic: dict[str, list[Listener]] = {}
        self._schemas: dict[str, tuple[Schema, Validator]] = {}
        self._declared: dict[str, tuple[Declaration, list[Listener]]] = {}
        self._in_process: set[Listener] = (
            set()
        )  # executor="process" (module-level functions: hashable)

    def on_event(
        self,
        topic: str,
        schema: Schema | None = None,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        tz: str | None = None,
        misfire: str | None = None,
        jitter: Duration | None = None,
        name: str | None = None,
        payload: Any = None,
        executor: Executor = None,
    ) -> Callable[[F], F]:
        """Decorator: run the function for every event of `topic` (async or sync), and
        optionally declare the schedule whose ticks are events of `topic`.

        Args:
            topic: the topic to listen to.
            schema: the payload's schema: a pydantic model class (the listener gets the
                model instance as event.payload) or a callable payload -> parsed that
                raises ValueError/TypeError on invalid input. Scheduling checks it where
                it is known, and a worker completes a job whose payload it refuses as
                `invalid_payload`, without retrying and without running listeners.
            cron: a cron expression (5 fields, or 6 with seconds first) read in `tz`
                (default UTC): a worker serving `topic` keeps this schedule stored
                (docs/how-to/cron.md); each tick runs every listener of the topic.
            every: or an interval ("15m", seconds, a timedelta; at least 1s), ticking at
                multiples of it since the Unix epoch, each tick moved later by up to `jitter`
                (at most the interval; a deterministic offset per tick).
            tz: the zone of `cron` (cron only).
            misfire: "coalesce" | "skip" | "all" (default: the worker's cron.misfire).
            jitter: the jitter of `every` (every only).
            name: the stored schedule's name (default `{topic}:cron` or `{topic}:every`, so a
                topic declares one of each unless names are given).
            payload: every tick's payload (JSON; checked against the topic's schema when a
                worker starts).
            executor: where it runs: None (an async function on the worker's loop, a sync one in
                its thread pool), "loop", "thread", or "process": in one of the worker's child
                processes (`[worker] processes`), for CPU-bound work that would hold the GIL;
                found there by module + qualname, so a module-level function.

        Raises:
            ValueError: an empty topic, a schema other than the topic's registered one, or a
                topic with `max_per_topic` listeners already; listeners.InvalidDeclaration (a
                ValueError) naming the trigger argument, its value and what is allowed, or a
                name another declaration already uses; an executor the function cannot run on
                (listeners.UnimportableListener for a lambda or nested function in a process).
            TypeError: a schema that is neither a model class nor callable.
        """
        if not isinstance(topic, str) or not topic.strip():
            raise ValueError(f"topic must be a non-empty string, got {topic!r}")
        if schema is not None:
            validator_of(schema)  # refuse a bad schema where it is written, not at first use
        declared = declaration(
            topic,
            cron=cron,
            every=every,
            tz=tz,
            misfire=misfire,
            jitter=jitter,
            name=name,
            payload=payload,
        )

        def register(fn: F) -> F:
            self.add(topic, fn, schema, declared, executor)
            return fn

        return register

    def add(
        self,
        topic: str,
        fn: Listener,
        schema: Schema | None = None,
        declared: Declaration | None = None,
        executor: Executor = None,
    ) -> None:
        """Register `fn` for `topic` (and the schedule it declares); registering the same
        function twice is a no-op.

        Raises:
            ValueError: `schema` differs from the one the topic already has, `declared`
                from the declaration of the same schedule name, the topic has
                `max_per_topic` listeners already, or `executor` is one `fn` cannot run on
                (or differs from the one it was registered with for another topic).
            TypeError: a schema that is neither a model class nor callable.
        """
        check_executor(
            fn,
            executor,
            inspect.iscoroutinefunction(fn)
            or inspect.iscoroutinefunction(getattr(fn, "__call__", None)),
        )
        if self._known(fn) and self.in_process(fn) != (executor == "process"):
            raise ValueError(
                f"listener {fn!r} is registered already with executor="
                f"{'process' if self.in_process(fn) else None!r}; it cannot also run with "
                f"executor={executor!r}"
            )
        listeners = self._by_topic.get(topic, [])
        if fn not in listeners and len(listeners) >= self.max_per_topic:
            raise ValueError(
                f"topic {topic!r} has {len(listeners)} listeners already, the most a "
                f"topic may have (max_per_topic={self.max_per_topic}); {fn!r} is not added"
            )
        if declared is not None:
            if declared.topic != topic:
                raise ValueError(
                    f"listener {fn!r} of topic {topic!r} declares "
                    f"a schedule of topic {declared.topic!r}"
                )
            known_decl = self._declared.get(declared.name)
            if known_decl is not None and known_decl[0] != declared:
                raise InvalidDeclaration(
                    f"schedule {declared.name!r} is already declared as {known_decl[0]} by "
                    f"{known_decl[1]!r}; listener {fn!r} declares {declared}: give each its "
                    "own name=",
                    "name",
                )
        if schema is not None:
            known = self._schemas.get(topic)
            if known is not None and known[0] is not schema:
                raise ValueError(
                    f"topic {topic!r} already has payload schema {known[0]!r}; "
                    f"listener {fn!r} registers {schema!r} (one schema per topic)"
                )
            if known is None:
                self._schemas[topic] = (schema, validator_of(schema))
        listeners = self._by_topic.setdefault(topic, [])
        if fn not in listeners:
            listeners.append(fn)
        if executor == "process":
            self._in_process.add(fn)
        if declared is not None:
            declarers = self._declared.setdefault(declared.name, (declared, []))[1]
            if fn not in declarers:
                declarers.append(fn)

    def remove(self, topic: str, fn: Listener) -> None:
        """Unregister `fn` from `topic` (no error when absent); the topic's schema goes
        with its last listener, a declared schedule with the last listener declaring it."""
        listeners = self._by_topic.get(topic, [])
        if fn in listeners:
            listeners.remove(fn)
        if not listeners:
            self._schemas.pop(topic, None)
        if self.in_process(fn) and not self._known(fn):
            self._in_process.discard(fn)
        for name, (decl, declarers) in list(self._declared.items()):
            if decl.topic == topic and fn in declarers:
                declarers.remove(fn)
                if not declarers:
                    del self._declared[name]

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

    def in_process(self, fn: Listener) -> bool:
        """Whether `fn` was registered with executor="process"."""
        try:
            return fn in self._in_process
        except TypeError:  # an unhashable callable object: never a process listener
            return False

    def process_listeners(self, topics: Iterable[str] | None = None) -> list[Listener]:
        """The listeners registered with executor="process" (of `topics` when given)."""
        wanted = None if topics is None else set(topics)
        return [
            fn
            for t, fns in self._by_topic.items()
            if wanted is None or t in wanted
            for fn in fns
            if self.in_process(fn)
        ]

    def _known(self, fn: Listener) -> bool:
        return any(fn in fns for fns in self._by_topic.values())

    def topics(self) -> list[str]:
        """Every topic with at least one listener."""
        return [t for t, fns in self._by_topic.items() if fns]

    def declarations(self, topics: Iterable[str] | None = None) -> list[Declaration]:
        """The schedules declared beside listeners (of `topics` when given), by name."""
        wanted = None if topics is None else set(topics)
        return [
            d for _, (d, _) in sorted(self._declared.items()) if wanted is None or d.topic in wanted
        ]

    def clear(self) -> None:
        """Forget every listener, schema and declared schedule (tests)."""
        self._by_topic.clear()
        self._schemas.clear()
        self._declared.clear()
        self._in_process.clear()


default_registry = ListenerRegistry()


def on_event(
    topic: str,
    schema: Schema | None = None,
    *,
    cron: str | None = None,
    every: Duration | None = None,
    tz: str | None = None,
    misfire: str | None = None,
    jitter: Duration | None = None,
    name: str | None = None,
    payload: Any = None,
    executor: Executor = None,
) -> Callable[[F], F]:
    """Register a listener for `topic` in the default registry, optionally declaring the
    schedule whose ticks are its events, and where it runs (arguments: see
    ListenerRegistry.on_event)."""
    return default_registry.on_event(
        topic,
        schema,
        cron=cron,
        every=every,
        tz=tz,
        misfire=misfire,
        jitter=jitter,
        name=name,
        payload=payload,
        executor=executor,
    )
