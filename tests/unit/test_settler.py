"""Settlement survives a Redis blip (issue 16): a batch whose write fails is written again
with backoff while its leases last, so a listener that succeeded is not recorded as
worker_lost and run again; past the lease the waiter gets the error."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from scheduler.core.errors import StorageError
from scheduler.core.job import Settlement
from scheduler.store.scripts import SettleCode
from scheduler.testing.clocks import FakeClock
from scheduler.worker.settler import Settler


class FlakyStore:
    """complete() fails `failures` times, then answers COMPLETED for each item; `batches`: the
    job ids of each batch it answered."""

    def __init__(self, failures: int = 0) -> None:
        self.failures, self.calls = failures, 0
        self.batches: list[list[str]] = []

    async def complete(self, items: Sequence[Settlement], now_ms: int, keep: int) -> list[int]:
        self.calls += 1
        if self.calls <= self.failures:
            raise StorageError("Connection closed by server")
        self.batches.append([s.job_id for s in items])
        return [int(SettleCode.COMPLETED)] * len(items)

    async def fail(self, items: Sequence[Settlement], now_ms: int) -> list[int]:
        raise AssertionError("not used")


def settler(
    store: Any,
    retry_for_s: float = 30.0,
    window_s: float = 0.0,
    hurry: Callable[[], bool] = lambda: False,
) -> Settler:
    s = Settler(store, FakeClock(), 10, retry_for_s, window_s=window_s, hurry=hurry)
    s.start()
    return s


async def test_a_failed_write_is_retried_until_it_lands() -> None:
    store = FlakyStore(failures=3)
    s = settler(store, retry_for_s=5.0)
    try:
        replies = await asyncio.wait_for(
            asyncio.gather(
                s.settle(Settlement("a", "w:1", "succeeded")),
                s.settle(Settlement("b", "w:1", "succeeded")),
            ),
            5,
        )
    finally:
        await s.stop()
    assert replies == [SettleCode.COMPLETED, SettleCode.COMPLETED] and store.calls == 4


async def test_past_the_lease_the_waiter_gets_the_error() -> None:
    store = FlakyStore(failures=10**6)
    s = settler(store, retry_for_s=0.3)
    try:
        with pytest.raises(StorageError):
            await asyncio.wait_for(s.settle(Settlement("a", "w:1", "succeeded")), 5)
    finally:
        await s.stop()
    assert 2 <= store.calls < 20, "retried with backoff, not in a tight loop"


async def test_settlements_within_a_window_share_one_write() -> None:
    """[worker] batch_window_ms: the first settlement after a quiet spell is written at once;
    those that follow within the window wait for its end and go in one call."""
    store = FlakyStore()
    s = settler(store, window_s=0.5)
    loop = asyncio.get_running_loop()
    try:
        started = loop.time()
        await asyncio.wait_for(s.settle(Settlement("a", "w:1", "succeeded")), 5)
        assert loop.time() - started < 0.25, "the first one is not held back"
        later = []
        for job_id in ("b", "c", "d"):
            later.append(asyncio.ensure_future(s.settle(Settlement(job_id, "w:1", "succeeded"))))
            await asyncio.sleep(0.01)
        await asyncio.wait_for(asyncio.gather(*later), 5)
    finally:
        await s.stop()
    assert store.batches == [["a"], ["b", "c", "d"]]


async def test_without_a_window_each_settlement_is_written_as_it_comes() -> None:
    store = FlakyStore()
    s = settler(store)
    try:
        for job_id in ("a", "b", "c"):
            await asyncio.wait_for(s.settle(Settlement(job_id, "w:1", "succeeded")), 5)
    finally:
        await s.stop()
    assert store.batches == [["a"], ["b"], ["c"]]


async def test_when_settling_attempts_hold_every_slot_the_write_does_not_wait() -> None:
    """The window never idles a worker: while the attempts waiting for their settlement hold
    every slot (hurry), each batch is written at once."""
    store = FlakyStore()
    s = settler(store, window_s=5.0, hurry=lambda: True)
    loop = asyncio.get_running_loop()
    try:
        started = loop.time()
        for job_id in ("a", "b"):
            await asyncio.wait_for(s.settle(Settlement(job_id, "w:1", "succeeded")), 10)
        assert loop.time() - started < 2.5
    finally:
        await s.stop()
    assert store.batches == [["a"], ["b"]]
