"""Batched settlement of attempts: completions and failures queue up while a
write is in flight (and, under load, for the rest of a batch window since the last
write began) and go to Redis in one script call per batch. A batch Redis
fails is written again, with backoff, until its attempts' leases would expire:
the scripts are fenced by the lease token, so a write that did land answers
LEASE_LOST the second time and changes nothing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from scheduler.core.clock import Clock
from scheduler.core.job import Settlement
from scheduler.store.redis import RedisStore
from scheduler.store.scripts import SettleReply, settle_reply
from scheduler.worker.pacer import Pacer

log = logging.getLogger("horae.worker")

# (settlement, its waiter, the loop time after which writing it again is pointless: its lease is
# over)
Queued = tuple[Settlement, "asyncio.Future[int]", float]
RETRY_FIRST_S, RETRY_MAX_S = 0.05, 1.0


class Settler:
    """Collects settlements and writes them in batches: one script call per batch.
    `retry_for_s`: how long a settlement is retried when Redis fails (its lease)."""

    def __init__(
        self,
        store: RedisStore,
        clock: Clock,
        keep_completed: int,
        retry_for_s: float = 30.0,
        window_s: float = 0.0,
        hurry: Callable[[], bool] = lambda: False,
    ) -> None:
        """`window_s`: batches are written at most once per window ([worker] batch_window_ms),
        unless `hurry()`: the attempts waiting for their settlement hold every slot."""
        self._store, self._clock, self._keep = store, clock, keep_completed
        self._pacer, self._hurry = Pacer(window_s), hurry
        self._retry_for_s = retry_for_s
        self._complete: list[Queued] = []
        self._fail: list[Queued] = []
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failures = 0  # consecutive failed writes (backoff; one warning per outage)

    def start(self) -> None:
        """Start writing batches in the background."""
        self._task = asyncio.create_task(self._loop(), name="horae-settler")

    async def settle(self, item: Settlement) -> SettleReply:
        """Queue one settlement (complete.lua without an error, fail.lua with one); returns
        the script's reply for it once written.

        Raises:
            StorageError: the batch holding it could not be written.
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        (self._complete if item.error is None else self._fail).append(
            (item, fut, loop.time() + self._retry_for_s)
        )
        self._ready.set()
        return settle_reply(await fut)

    async def _flush(self, final: bool = False) -> bool:
        """Write what is queued; False when a write failed and items wait to be retried."""
        complete, self._complete = self._complete, []
        fail, self._fail = self._fail, []
        ok = True
        for batch, write, queue in (
            (complete, self._write_complete, self._complete),
            (fail, self._store.fail, self._fail),
        ):
            if not batch:
                continue
            try:
                codes = await write([s for s, _, _ in batch], self._clock.now_ms())
            except Exception as exc:  # noqa: BLE001 - retried, else handed to every waiter
                ok = False
                now = asyncio.get_running_loop().time()
                if self._failures == 0:
                    log.warning(
                        "settling %d attempts failed (%s: %s); retrying while their leases last",
                        len(batch),
                        type(exc).__name__,
                        exc,
                        extra={"event": "settle_retry"},
                    )
                for item in batch:
                    if not final and now < item[2]:
                        queue.append(item)
                    elif not item[1].done():
                        item[1].set_exception(exc)
                continue
            for (_, fut, _), code in zip(batch, codes):
                if not fut.done():
                    fut.set_result(code)
        if ok and self._failures:
            log.info("settling attempts works again", extra={"event": "settle_resumed"})
        self._failures = 0 if ok else self._failures + 1
        return ok

    async def _write_complete(self, items: Sequence[Settlement], now_ms: int) -> list[int]:
        return await self._store.complete(items, now_ms, self._keep)

    async def _loop(self) -> None:
        while True:
            await self._ready.wait()
            await self._pacer.wait(self._hurry())  # (under load: a window's in one call)
            self._ready.clear()
            if not await self._flush():
                await asyncio.sleep(min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** min(self._failures, 10)))
                self._ready.set()

    async def stop(self) -> None:
        """Write what is queued (once more, no retry), then stop."""
        await self._flush(final=True)
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
