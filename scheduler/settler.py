"""Batched settlement of attempts: completions and failures queue up while a
write is in flight and go to Redis in one script call per batch."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from scheduler.clock import Clock
from scheduler.job import Settlement
from scheduler.scripts import SettleReply, settle_reply
from scheduler.store import RedisStore


class Settler:
    """Collects settlements and writes them in batches: one script call per batch."""

    def __init__(self, store: RedisStore, clock: Clock, keep_completed: int) -> None:
        self._store, self._clock, self._keep = store, clock, keep_completed
        self._complete: list[tuple[Settlement, asyncio.Future[int]]] = []
        self._fail: list[tuple[Settlement, asyncio.Future[int]]] = []
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start writing batches in the background."""
        self._task = asyncio.create_task(self._loop(), name="horae-settler")

    async def settle(self, item: Settlement) -> SettleReply:
        """Queue one settlement (complete.lua without an error, fail.lua with one); returns
        the script's reply for it once written.

        Raises:
            StorageError: the batch holding it could not be written.
        """
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        (self._complete if item.error is None else self._fail).append((item, fut))
        self._ready.set()
        return settle_reply(await fut)

    async def _flush(self) -> None:
        complete, self._complete = self._complete, []
        fail, self._fail = self._fail, []
        for batch, write in ((complete, self._write_complete), (fail, self._store.fail)):
            if not batch:
                continue
            try:
                codes = await write([s for s, _ in batch], self._clock.now_ms())
            except Exception as exc:  # noqa: BLE001 - handed to every waiter
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (_, fut), code in zip(batch, codes):
                if not fut.done():
                    fut.set_result(code)

    async def _write_complete(self, items: Sequence[Settlement], now_ms: int) -> list[int]:
        return await self._store.complete(items, now_ms, self._keep)

    async def _loop(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            await self._flush()

    async def stop(self) -> None:
        """Write what is queued, then stop."""
        await self._flush()
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
