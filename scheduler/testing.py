"""Test helpers shipped with the package: a clock you move by hand."""

from __future__ import annotations

import asyncio


class FakeClock:
    """A Clock whose time only moves when advance() is called.

    Sleepers wake as soon as the clock passes their deadline, so a test drives
    delays, backoff and cron against a real Redis without waiting.
    """

    def __init__(self, start_ms: int = 1_800_000_000_000) -> None:
        self._now = start_ms
        self._moved = asyncio.Event()

    def now_ms(self) -> int:
        return self._now

    def set_ms(self, now_ms: int) -> None:
        """Jump to an absolute time (never backwards)."""
        if now_ms < self._now:
            raise ValueError(f"FakeClock cannot go back from {self._now} to {now_ms}")
        self._now = now_ms
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline passed."""
        self.set_ms(self._now + int(seconds * 1000))

    async def sleep_until(self, deadline_ms: int, wake: asyncio.Event) -> None:
        while self._now < deadline_ms and not wake.is_set():
            moved = self._moved
            waiter = asyncio.ensure_future(wake.wait())
            mover = asyncio.ensure_future(moved.wait())
            try:
                await asyncio.wait({waiter, mover}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
                mover.cancel()
