"""Dispatch of one event to its listeners: concurrency, errors, timeouts."""

from __future__ import annotations

import asyncio

from listeners import dispatch


async def test_single_listener_timeout_is_timed_out_not_a_failure() -> None:
    async def slow(event: object) -> None:
        await asyncio.sleep(5)

    result = await dispatch([slow], object(), timeout=0.05)
    assert result.timed_out and not result.failures and not result.ok


async def test_single_listener_raising_timeout_error_itself_is_a_failure() -> None:
    async def gives_up(event: object) -> None:
        raise TimeoutError("upstream timed out")

    result = await dispatch([gives_up], object(), timeout=5)
    assert not result.timed_out
    assert [type(f.exception) for f in result.failures] == [TimeoutError]
    assert result.failures[0].listener.endswith("gives_up")


async def test_many_listeners_run_concurrently_and_errors_are_collected() -> None:
    started: list[str] = []
    gate = asyncio.Event()

    async def a(event: object) -> None:
        started.append("a")
        await gate.wait()

    async def b(event: object) -> None:
        started.append("b")
        gate.set()
        raise ValueError("b failed")

    def sync(event: object) -> None:
        started.append("sync")

    result = await dispatch([a, b, sync], object(), timeout=2)
    assert sorted(started) == ["a", "b", "sync"]
    assert [str(f.exception) for f in result.failures] == ["b failed"] and not result.timed_out


async def test_no_listener_is_ok_with_zero_listeners() -> None:
    result = await dispatch([], object(), timeout=1)
    assert result.ok and result.listeners == 0


async def test_callable_objects_sync_and_async_even_unhashable_ones() -> None:
    seen: list[str] = []

    class AsyncHandler:
        __hash__ = None  # type: ignore[assignment]  # e.g. a dataclass with eq=True

        async def __call__(self, event: object) -> None:
            seen.append("async object")

    def sync_fn(event: object) -> None:
        seen.append("sync function")

    for _ in range(2):  # the second time the answer comes from the cache where there is one
        assert (await dispatch([AsyncHandler()], object(), timeout=5)).ok
        assert (await dispatch([sync_fn], object(), timeout=5)).ok
    assert seen == ["async object", "sync function"] * 2
