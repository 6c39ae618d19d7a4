"""The audit relay on a thread of its own, with its own event loop.

Reading, decoding and folding a batch is CPU work in Python: on the loop of the worker it
shares a process with, a 2,000-event batch held claims and settlements for tens of
milliseconds (a worker's latency p99 went from ~5 ms to ~100 ms with the audit on, bench
`e2e_split`). On a thread, the interpreter switches to the worker's loop every few
milliseconds (sys.getswitchinterval) whatever the relay is doing. The relay owns no object
bound to the caller's loop (its Redis wire and its PostgreSQL pool are opened on first
use), so the same AuditRelay runs here unchanged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from audit.relay.consumer import AuditRelay

T = TypeVar("T")


class ThreadedRelay:
    """start()/stop()/lag() of an AuditRelay whose loop runs on a daemon thread (a process
    that dies takes it along; what it had not acknowledged is taken over by another relay)."""

    def __init__(self, relay: AuditRelay) -> None:
        self.relay = relay
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    async def start(self) -> None:
        """Start the thread and the relay in it (idempotent); returns once the relay runs."""
        if self.running:
            return
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._main, args=(started,), name="horae-audit-relay", daemon=True
        )
        self._thread.start()
        await asyncio.wrap_future(started)

    def _main(self, started: concurrent.futures.Future[None]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self.relay.start())
            started.set_result(None)
            loop.run_forever()  # until stop() has drained the relay
        except BaseException as exc:  # noqa: BLE001 - handed to the caller of start()
            if not started.done():
                started.set_exception(exc)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def lag(self) -> tuple[int, float | None]:
        return await self._call(self.relay.lag())

    async def stop(self) -> None:
        """Drain and stop the relay (AuditRelay.stop), then end the thread."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None or not thread.is_alive():
            return
        try:
            await self._call(self.relay.stop())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            await asyncio.to_thread(thread.join)
            self._thread = None
