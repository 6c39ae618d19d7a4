"""`horae worker` waits for Redis at start ([worker] startup_wait_s): a worker started while Redis
restarts, loads its data or fails over would otherwise exit at once, and its supervisor
(systemd, Kubernetes) would start it again only after a back-off of its own, often longer than
the outage. Only the start is tried again: once the worker runs, it rides out a lost connection
itself (every call is retried)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from scheduler.core.errors import ServerUnavailable

log = logging.getLogger("horae.worker")

FIRST_DELAY_S = 0.25
MAX_DELAY_S = 5.0


async def serve_when_reachable(
    serve: Callable[[Callable[[], None]], Awaitable[None]], wait_s: float, stop: asyncio.Event
) -> None:
    """Run `serve(started)`; while it has not called `started()`, a ServerUnavailable starts it
    again after a back-off (0.25 s, doubling up to 5 s), for up to `wait_s` seconds in all.
    Returns without serving when `stop` is set before the worker runs.

    Raises:
        ServerUnavailable: still unavailable after `wait_s` seconds.
        StorageError, and any other error: at once, as `serve` raised it.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    delay = FIRST_DELAY_S
    while True:
        running = False

        def started() -> None:
            nonlocal running
            running = True

        try:
            await serve(started)
            return
        except ServerUnavailable as exc:
            if running:
                raise
            if stop.is_set():
                return  # asked to stop before it ran: nothing to report
            left = deadline - loop.time()
            if left <= 0:
                raise
            pause = min(delay, left)
            log.warning(
                "cannot start yet: %s; trying again in %.2f s (for %.1f s more, "
                "[worker] startup_wait_s)",
                exc,
                pause,
                left,
                extra={"event": "worker_start_retry"},
            )
            try:
                await asyncio.wait_for(stop.wait(), pause)
                return  # stopped while waiting: nothing ran
            except TimeoutError:
                delay = min(delay * 2, MAX_DELAY_S)
