"""Test helpers shipped with the package: a clock you move by hand, and one that also
knows when a worker's claim loop waits on it (the pytest plugin's time machine)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


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


class SteppingClock(FakeClock):
    """A FakeClock that knows when a claim loop waits on it, so a driver can tell a
    worker has planned its next wake-up (TimeMachine in scheduler/testing/time_machine.py).

    `kick()` wakes every waiting loop (each re-plans: fires due crons, claims at the
    current time). Since the latest kick, `waited` says whether a loop began a wait, and
    `busy` the most `busy()` (the worker's running attempts) at the start of one: 0 means
    every claim since the kick took nothing.
    """

    def __init__(
        self, start_ms: int = 1_800_000_000_000, busy: Callable[[], int] = lambda: 0
    ) -> None:
        super().__init__(start_ms)
        self.busy_now = busy
        self.waited = False
        self.busy = 0
        self._waiting: set[asyncio.Event] = set()

    @property
    def waiting(self) -> bool:
        """Whether a loop is waiting on this clock now."""
        return bool(self._waiting)

    def kick(self) -> None:
        """Wake every waiting loop, and start counting anew (`waited`, `busy`)."""
        self.waited, self.busy = False, 0
        for wake in self._waiting:
            wake.set()

    async def sleep_until(self, deadline_ms: int, wake: asyncio.Event) -> None:
        if self._now >= deadline_ms or wake.is_set():
            return  # no wait: the caller re-plans at once
        self.waited, self.busy = True, max(self.busy, self.busy_now())
        self._waiting.add(wake)
        try:
            await super().sleep_until(deadline_ms, wake)
        finally:
            self._waiting.discard(wake)
