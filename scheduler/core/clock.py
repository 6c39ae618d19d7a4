"""Time as a parameter. Every due/lease comparison uses one clock: the Redis
server's, reached through an offset measured against its TIME, so a worker
whose own clock is skewed can never fire a job early or twice."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

import redis.asyncio as aioredis


class Clock(Protocol):
    """What the engine needs of time."""

    def now_ms(self) -> int:
        """Current epoch milliseconds on the shared (Redis) clock."""

    async def sleep_until(self, deadline_ms: int, wake: asyncio.Event) -> None:
        """Return at deadline_ms on this clock, or earlier when `wake` is set (an
        implementation may set `wake` itself at the deadline: callers clear it)."""


def caller_now_ms(clock: Clock) -> int:
    """The instant a caller of this process means by "now" (datetime.now()): its own wall
    clock when the clock has one (SystemClock; it may lead the Redis-calibrated clock by a
    fraction of a millisecond), else the clock's now (a fake clock is everyone's time)."""
    wall = getattr(clock, "wall_ms", None)
    return int(wall()) if wall is not None else clock.now_ms()


class SystemClock:
    """Local monotonic-ish wall time plus the offset to the Redis server's clock."""

    def __init__(self) -> None:
        self.offset_ms = 0.0

    async def calibrate(self, redis: aioredis.Redis) -> float:
        """Measure the offset to Redis TIME (midpoint of the round trip); returns it."""
        best: tuple[float, float] | None = None
        for _ in range(3):
            before = time.time() * 1000
            sec, usec = await redis.time()
            after = time.time() * 1000
            rtt = after - before
            offset = (sec * 1000 + usec / 1000) - (before + rtt / 2)
            if best is None or rtt < best[0]:
                best = (rtt, offset)
        assert best is not None
        self.offset_ms = best[1]
        return self.offset_ms

    def now_ms(self) -> int:
        return int(time.time() * 1000 + self.offset_ms)

    def wall_ms(self) -> int:
        """This process's own clock (what datetime.now() reads), epoch ms, rounded as a run_at
        is (timeutil.utc_to_ms): truncated, a datetime.now() read in the second half of a
        millisecond came out 1 ms later than now, and half of all schedule_at(now) calls
        missed the run-now path."""
        return round(time.time() * 1000)

    async def sleep_until(self, deadline_ms: int, wake: asyncio.Event) -> None:
        # From the unrounded time: now_ms() truncates, which would wake up to 1 ms late.
        delay = (deadline_ms - (time.time() * 1000 + self.offset_ms)) / 1000
        if delay <= 0 or wake.is_set():
            return
        # A timer that sets `wake` (the caller clears it before it re-plans) instead of
        # wait_for, which wraps the wait in a task of its own every time.
        timer = asyncio.get_running_loop().call_later(delay, wake.set)
        try:
            await wake.wait()
        finally:
            timer.cancel()
