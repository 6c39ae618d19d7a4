"""@on_event(executor=...) checked where it is written (listeners/executors.py,
listeners/registry.py), the first-use check of a process listener
(scheduler/process_pool.ProcessPool.check), and how a listener's exception crosses from a child back
to the worker (process_child.error_of, process_pool.rebuilt)."""

from __future__ import annotations

import functools
import pickle
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

import listeners.registry as registry_module
from listeners import EXECUTORS, ListenerRegistry, ScheduleArrivedEvent, UnimportableListener
from listeners.executors import check_resolves, resolve
from scheduler.core.config import WorkerSettings
from scheduler.core.errors import ConfigError, Retry
from scheduler.worker.process_child import error_of
from scheduler.worker.process_pool import ProcessPool, rebuilt, sent


def render(event: Any) -> None:
    """A module-level sync listener: importable by module + qualname."""


async def notify(event: Any) -> None:
    """A module-level async listener."""


def _wrapping(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(event: Any) -> None:
        fn(event)

    return wrapper


_WRAPPED_REGISTRY = ListenerRegistry()


@_wrapping
@_WRAPPED_REGISTRY.on_event("wrapped", executor="process")
def wrapped(event: Any) -> None:
    """@on_event below another decorator: the module-level name is the wrapper, not the listener."""


def test_executor_values_are_checked_naming_the_listener_the_value_and_the_choices() -> None:
    reg = ListenerRegistry()
    assert EXECUTORS == ("loop", "thread", "process")
    with pytest.raises(ValueError) as err:
        reg.on_event("t", executor="fork")(render)  # type: ignore[arg-type]
    assert str(err.value) == (
        f"executor of listener {__name__}.render must be one of 'loop', 'thread', "
        "'process' or None, got 'fork'"
    )
    with pytest.raises(
        ValueError, match=r"executor='loop' of listener .*\.render: a sync function would block"
    ):
        reg.on_event("t", executor="loop")(render)
    with pytest.raises(
        ValueError, match=r"executor='thread' of listener .*\.notify: an async function"
    ):
        reg.on_event("t", executor="thread")(notify)
    assert reg.topics() == []  # nothing registered by a refused decorator
    reg.on_event("t", executor="loop")(notify)
    reg.on_event("t", executor="thread")(render)
    assert reg.listeners("t") == (notify, render) and not reg.in_process(render)


def test_a_process_listener_must_be_importable_by_module_and_qualname() -> None:
    reg = ListenerRegistry()
    with pytest.raises(UnimportableListener) as err:
        reg.add("t", lambda event: None, executor="process")
    assert (
        f"listener "
        f"{__name__}.test_a_process_listener_must_be_importable_by_module_and_qualname.<locals>."
        "<lambda> cannot run with executor='process'" in str(err.value)
    )
    assert "define it at module level" in str(err.value)

    def nested(event: Any) -> None:
        pass

    with pytest.raises(
        UnimportableListener, match=r"<locals>\.nested cannot run with executor='process'"
    ):
        reg.on_event("t", executor="process")(nested)
    nested.__module__ = "__main__"
    nested.__qualname__ = "nested"
    with pytest.raises(
        UnimportableListener, match=r"listener __main__\.nested .* defined in __main__"
    ):
        reg.add("t", nested, executor="process")
    assert isinstance(err.value, ValueError) and reg.topics() == []
    registry_module.on_event("module.level", executor="process")(
        render
    )  # the default registry's decorator
    try:
        assert registry_module.default_registry.in_process(render)
    finally:
        registry_module.default_registry.remove("module.level", render)
    assert not registry_module.default_registry.in_process(render)


def test_one_function_has_one_executor_and_the_registry_lists_its_process_listeners() -> None:
    reg = ListenerRegistry()
    reg.add("pdf", render, executor="process")
    reg.add("pdf", notify)
    reg.add("pdf.again", render, executor="process")  # the same executor for another topic: fine
    with pytest.raises(
        ValueError,
        match=r"registered already with executor='process'; it cannot also run with "
        r"executor=None",
    ):
        reg.add("other", render)
    assert reg.process_listeners() == [render, render] and reg.process_listeners(["pdf"]) == [
        render
    ]
    assert reg.process_listeners(["nothing"]) == []
    reg.remove("pdf", render)
    assert reg.in_process(render)  # still a listener of pdf.again
    reg.remove("pdf.again", render)
    assert not reg.in_process(render) and reg.process_listeners() == []


def test_first_use_refuses_a_listener_whose_module_level_name_is_another_object() -> None:
    (fn,) = _WRAPPED_REGISTRY.listeners("wrapped")
    with pytest.raises(
        UnimportableListener,
        match=r"wrapped is <function wrapped at .*>, not the registered "
        r"function \(a decorator wraps it after @on_event\?\): "
        r"put @on_event outermost",
    ):
        check_resolves(fn)
    with pytest.raises(
        ConfigError, match=rf"listener {__name__}\.wrapped cannot run with executor='process'"
    ):
        ProcessPool(_WRAPPED_REGISTRY, WorkerSettings()).check(["wrapped"])
    ProcessPool(_WRAPPED_REGISTRY, WorkerSettings()).check(
        ["other"]
    )  # a worker not serving it: no check
    reg = ListenerRegistry()
    reg.add("pdf", render, executor="process")
    ProcessPool(reg, WorkerSettings()).check(["pdf"])
    with pytest.raises(
        UnimportableListener, match=r"importing 'no_such_module_x' failed: ModuleNotFoundError"
    ):
        resolve("no_such_module_x", "f")
    with pytest.raises(UnimportableListener, match=rf"module '{__name__}' has no 'missing.f'"):
        resolve(__name__, "missing.f")


def test_pool_settings_are_bounded() -> None:
    settings = WorkerSettings()
    assert (settings.processes, settings.max_jobs_per_child, settings.max_memory_mb_per_child) == (
        0,
        0,
        0,
    )
    assert ProcessPool(ListenerRegistry(), settings).size >= 1  # 0: the core count
    assert ProcessPool(ListenerRegistry(), WorkerSettings(processes=3)).size == 3
    for field in ("processes", "max_jobs_per_child", "max_memory_mb_per_child"):
        with pytest.raises(ValidationError, match=field):
            WorkerSettings(**{field: -1})


class PageError(Exception):
    def __init__(self, page: int) -> None:
        super().__init__(f"page {page} does not render")
        self.page = page


class Unpicklable(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def _local_error() -> type[Exception]:
    class LocalError(Exception):
        pass

    return LocalError


LocalError = _local_error()  # its qualname does not resolve


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001
        return caught


def test_a_childs_exception_comes_back_with_its_type_message_and_traceback() -> None:
    back = rebuilt(error_of(_raised(Retry(delay=7, message="later"))), 42)
    assert (
        type(back) is Retry and back.delay == 7 and str(back) == "later"
    )  # the retry decision survives
    assert "raised in listener process 42:\nTraceback (most recent call last):" in back.__notes__[0]
    assert "in _raised\n    raise exc" in back.__notes__[0]
    back = rebuilt(error_of(_raised(PageError(3))), 42)  # its __init__ is not called again
    assert type(back) is PageError and back.page == 3 and str(back) == "page 3 does not render"
    back = rebuilt(
        error_of(_raised(Unpicklable("holds a lock"))), 42
    )  # one of the same name and message
    assert (
        type(back).__name__ == "Unpicklable"
        and type(back) is not Unpicklable
        and str(back) == "holds a lock"
    )
    assert type(back).__module__ == __name__ and back.__notes__[0].startswith(
        "raised in listener process 42:"
    )
    back = rebuilt(error_of(_raised(LocalError("defined in a function"))), 42)
    assert type(back).__name__ == "LocalError" and str(back) == "defined in a function"
    with pytest.raises(TypeError):
        pickle.dumps(Unpicklable("x"))


def test_an_event_that_does_not_pickle_is_refused_naming_the_listener() -> None:
    class Local:  # a payload model a child could not import
        pass

    good = ScheduleArrivedEvent("j", "t", {"page": 1}, 1, 3, datetime.now(UTC), reporter=object())  # type: ignore[arg-type]
    assert pickle.loads(sent(render, good)).reporter is None
    with pytest.raises(
        TypeError,
        match=rf"the event of listener {__name__}\.render cannot be sent to a child "
        r"process \(executor='process'\): (PicklingError|AttributeError): .*Local",
    ):
        sent(render, ScheduleArrivedEvent("j", "t", Local(), 1, 3, datetime.now(UTC)))


def test_an_unhashable_callable_listener_registers_and_unregisters_as_before() -> None:
    class Listener:
        __hash__ = None  # type: ignore[assignment]

        def __eq__(self, other: object) -> bool:
            return other is self

        def __call__(self, event: Any) -> None:
            pass

    reg, fn = ListenerRegistry(), Listener()
    reg.add("t", fn)
    reg.add("t", fn)  # again: a no-op
    assert reg.listeners("t") == (fn,) and not reg.in_process(fn)
    reg.remove("t", fn)
    assert reg.listeners("t") == ()
