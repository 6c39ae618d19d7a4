"""Settlement survives a Redis blip (issue 16): a batch whose write fails is written again
with backoff while its leases last, so a listener that succeeded is not recorded as
worker_lost and run again; past the lease the waiter gets the error."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from scheduler.core.errors import StorageError
from scheduler.core.job import Settlement
from scheduler.store.scripts import SettleCode
from scheduler.testing.clocks import FakeClock
from scheduler.worker.settler import Settler


class FlakyStore:
    """complete() fails `failures` times, then answers COMPLETED for each item."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    async def complete(self, items: Sequence[Settlement], now_ms: int, keep: int) -> list[int]:
        self.calls += 1
        if self.calls <= self.failures:
            raise StorageError("Connection closed by server")
        return [int(SettleCode.COMPLETED)] * len(items)

    async def fail(self, items: Sequence[Settlement], now_ms: int) -> list[int]:
        raise AssertionError("not used")


def settler(store: Any, retry_for_s: float) -> Settler:
    s = Settler(store, FakeClock(), keep_completed=10, retry_for_s=retry_for_s)
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
