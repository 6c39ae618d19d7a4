"""Where a listener runs (`@on_event(topic, executor=...)`), and how a listener that runs in a
child process is found there again: by module and qualname, the way `horae worker --app`
imports the app, since a function cannot be sent to another interpreter."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Literal

# None (the default): an async listener on the worker's loop, a sync one in its thread pool.
# "loop" / "thread" say so explicitly (checked against the function); "process": in one of the
# worker's child processes (scheduler/worker/process_pool.py), for CPU-bound work that holds the
# GIL.
Executor = Literal["loop", "thread", "process"] | None
EXECUTORS: tuple[str, ...] = ("loop", "thread", "process")


class UnimportableListener(ValueError):
    """A listener of executor="process" that a child process could not import by module +
    qualname."""


def check_executor(fn: Any, executor: Any, is_async: bool) -> None:
    """Refuse an executor this listener cannot run on, naming the listener, the value and what is
    allowed.

    Raises:
        ValueError: an unknown value, "loop" for a sync function or "thread" for an async one.
        UnimportableListener: "process" for a lambda, a nested function or one of `__main__`.
    """
    name = listener_path(fn)
    if executor is not None and executor not in EXECUTORS:
        raise ValueError(
            f"executor of listener {name} must be one of {', '.join(map(repr, EXECUTORS))} "
            f"or None, got {executor!r}"
        )
    if executor == "loop" and not is_async:
        raise ValueError(
            f"executor='loop' of listener {name}: a sync function would block the worker's loop; "
            "make it async, or use executor='thread' or 'process'"
        )
    if executor == "thread" and is_async:
        raise ValueError(
            f"executor='thread' of listener {name}: an async function runs on the loop "
            "(executor='loop' or None), or in a child process (executor='process')"
        )
    if executor == "process":
        reason = _unimportable(fn)
        if reason:
            raise UnimportableListener(
                f"listener {name} cannot run with executor='process': {reason}"
            )


def listener_path(fn: Any) -> str:
    """module.qualname of a listener (as listeners.qualified_name)."""
    return (
        f"{getattr(fn, '__module__', None) or '?'}.{getattr(fn, '__qualname__', None) or repr(fn)}"
    )


def _unimportable(fn: Any) -> str:
    """Why a child could not find `fn` by module + qualname (seen at decoration time); "" when it
    can."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return "it has no __module__/__qualname__ (a callable object?): use a module-level function"
    if "<lambda>" in qualname or "<locals>" in qualname:
        return (
            "a child process imports it by module and qualname, and a lambda or a function "
            "defined inside another function has no such name: define it at module level"
        )
    if module == "__main__":
        return (
            "it is defined in __main__, which a child process does not import: move it to a module "
            "(`horae worker --app module`)"
        )
    return ""


def resolve(module: str, qualname: str) -> Callable[..., Any]:
    """The object named `qualname` in `module`, importing the module.

    Raises:
        UnimportableListener: the module does not import or has no such name.
    """
    try:
        target: Any = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any import error is the listener's
        raise UnimportableListener(
            f"listener {module}.{qualname}: importing {module!r} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    for part in qualname.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UnimportableListener(
                f"listener {module}.{qualname}: module {module!r} has no {qualname!r}"
            ) from None
    return target  # type: ignore[no-any-return]


def check_resolves(fn: Any) -> None:
    """Refuse (at a worker's start, or first use) a process listener whose module-level name is
    another object: a child would run that object, not the registered function (a decorator above
    @on_event).

    Raises:
        UnimportableListener: naming the listener and why.
    """
    reason = _unimportable(fn)
    if reason:
        raise UnimportableListener(
            f"listener {listener_path(fn)} cannot run with executor='process': {reason}"
        )
    found = resolve(fn.__module__, fn.__qualname__)
    if found is not fn:
        raise UnimportableListener(
            f"listener {listener_path(fn)} cannot run with executor='process': "
            f"{fn.__module__}.{fn.__qualname__} is {found!r}, not the registered "
            f"function (a decorator wraps it after @on_event?): put @on_event "
            "outermost"
        )
