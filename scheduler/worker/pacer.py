"""At most one Redis call per window while work keeps coming: the worker's claims and its
settlements each go through one Pacer, so that under load each script call carries what
arrived meanwhile (fewer, larger calls: Redis pays per call far more than per job), while a
call after a quiet spell goes at once ([worker] batch_window_ms)."""

from __future__ import annotations

import asyncio


class Pacer:
    """Spaces calls at least `window_s` apart (0: no spacing)."""

    def __init__(self, window_s: float) -> None:
        self._window = window_s
        self._last = float("-inf")  # loop time of the last call's start

    async def wait(self, hurry: bool = False) -> None:
        """Return when the next call may start: at once when the last one started a window
        ago or more (or `hurry`: waiting would idle the worker), else at the end of its
        window."""
        if self._window <= 0:
            return
        loop = asyncio.get_running_loop()
        rest = self._last + self._window - loop.time()
        if rest > 0 and not hurry:
            await asyncio.sleep(rest)
        self._last = loop.time()
