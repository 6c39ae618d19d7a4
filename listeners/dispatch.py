"""Run every listener of one event concurrently, under a timeout, and collect
their errors and the values they returned. Knows nothing of Redis, Postgres or retries."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from listeners.registry import Listener


@dataclass(frozen=True)
class ListenerFailure:
    """One listener's exception, kept for the error record."""

    listener: str
    exception: BaseException


@dataclass(frozen=True)
class DispatchResult:
    """What happened when one event ran through its listeners. `results`: (listener name, value)
    of each listener that returned something other than None, in registration order."""

    listeners: int
    failures: tuple[ListenerFailure, ...] = field(default_factory=tuple)
    timed_out: bool = False
    results: tuple[tuple[str, Any], ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures and not self.timed_out


def qualified_name(fn: Listener) -> str:
    """module.qualname of a listener, for logs, errors and span names."""
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or repr(fn)
    return f"{module}.{name}"


def _is_async(fn: Listener) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)
    )


_is_async_cached = functools.lru_cache(maxsize=1024)(_is_async)


def is_async(fn: Listener) -> bool:
    """Whether calling fn returns a coroutine (asked once per listener, not per call)."""
    try:
        return _is_async_cached(fn)
    except TypeError:  # an unhashable callable object
        return _is_async(fn)


async def call_listener(fn: Listener, event: Any) -> Any:
    """Run one listener: async ones on the loop, sync ones in a thread. Returns what it returned."""
    if is_async(fn):
        return await fn(event)
    # A sync listener runs in a thread so it cannot block the worker's loop; on timeout
    # the thread cannot be killed and runs to its end, but the attempt is failed already.
    result = await asyncio.to_thread(fn, event)
    if inspect.isawaitable(result):
        return await result
    return result


async def dispatch(
    listeners: Sequence[Listener],
    event: Any,
    timeout: float | None,
    call: Callable[[Listener, Any], Awaitable[Any]] = call_listener,
) -> DispatchResult:
    """Run all listeners concurrently; any raising, or the timeout, fails the attempt. What each
    returns (None: nothing) is in the result's `results`.

    Args:
        listeners: the topic's listeners (may be empty).
        event: the event object handed to each.
        timeout: seconds for all of them together; None for no limit.
        call: runs one listener; the worker passes a wrapper that adds a span.
    """
    if not listeners:
        return DispatchResult(listeners=0)
    if len(listeners) == 1:
        return await _dispatch_one(listeners[0], event, timeout, call)
    tasks = [asyncio.ensure_future(call(fn, event)) for fn in listeners]
    try:
        done, pending = await asyncio.wait(tasks, timeout=timeout)
    except BaseException:
        # The attempt itself was cancelled (worker stop after its grace): stop the
        # listeners too, or a released job would run twice. Sync listeners in
        # threads cannot be stopped and run to their end.
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    failures = tuple(
        ListenerFailure(qualified_name(fn), task.exception())  # type: ignore[arg-type]
        for fn, task in zip(listeners, tasks)
        if task in done and not task.cancelled() and task.exception() is not None
    )
    if failures or pending:
        return DispatchResult(listeners=len(listeners), failures=failures, timed_out=bool(pending))
    results = tuple(
        (qualified_name(fn), value)
        for fn, task in zip(listeners, tasks)
        if (value := task.result()) is not None
    )
    return DispatchResult(listeners=len(listeners), results=results)


async def _dispatch_one(
    fn: Listener,
    event: Any,
    timeout: float | None,
    call: Callable[[Listener, Any], Awaitable[Any]],
) -> DispatchResult:
    """The common case, awaited inline: no task and no asyncio.wait, whose cost per job shows
    on a busy worker."""
    limit = asyncio.timeout(timeout)
    try:
        async with limit:
            value = await call(fn, event)
    except TimeoutError as exc:
        if limit.expired():
            return DispatchResult(listeners=1, timed_out=True)
        return DispatchResult(listeners=1, failures=(ListenerFailure(qualified_name(fn), exc),))
    except Exception as exc:  # noqa: BLE001 - a listener's error is the attempt's outcome
        return DispatchResult(listeners=1, failures=(ListenerFailure(qualified_name(fn), exc),))
    if value is None:
        return DispatchResult(listeners=1)
    return DispatchResult(listeners=1, results=((qualified_name(fn), value),))
