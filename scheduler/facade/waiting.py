"""Scheduler.wait and wait_many: block until jobs reach a terminal state, woken by the
engine (the done channel that the scripts ending a waited job publish on), never by
polling. One subscription per Scheduler, shared by all of its waiters."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import timedelta

from scheduler.core.errors import InvalidJobId, JobNotFound, SchedulerError, WaitTimeout
from scheduler.core.job import JobInfo
from scheduler.core.outbox import TERMINAL_STATUSES
from scheduler.core.timeutil import parse_duration
from scheduler.core.validation import check_job_id
from scheduler.store.redis import RedisStore
from scheduler.store.wire import Subscription

Timeout = timedelta | float | int | str | None


class Waiters:
    """The waiters of one Scheduler: each registers an asyncio.Event under its job id; one
    subscription to the namespace's done channel sets the events of the id it hears.

    Race-free by order: subscribe, then flag the job and read its state in one script
    (lua/watch_job.lua). A job that ends after that script is published to a
    subscription already listening; one that ended before shows its state there.
    """

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self._events: dict[str, set[asyncio.Event]] = {}
        self._sub: Subscription | None = None
        self._subscribing: asyncio.Lock | None = None
        self._closed = False

    async def wait(self, job_id: str, timeout: Timeout = None) -> JobInfo:
        """The job once it is completed, failed or cancelled (at once when it already is).

        Args:
            job_id: the job to wait for.
            timeout: how long to block at most (a timedelta, seconds, or "30s"), real time
                (not the scheduler's clock: a test with a FakeClock still gets its timeout);
                None: no limit.

        Raises:
            WaitTimeout: the timeout passed first (also a TimeoutError); the job goes on.
            JobNotFound: no such job, or it was deleted (or dropped by retention) while waited for.
            InvalidJobId, InvalidDelay: a bad job id or timeout (nothing was waited for).
        """
        return (await self.wait_many([job_id], timeout))[0]

    async def wait_many(self, job_ids: Iterable[str], timeout: Timeout = None) -> list[JobInfo]:
        """Every job once each is terminal, in the order of `job_ids` (as wait; one timeout for
        all).

        Raises:
            WaitTimeout, JobNotFound (for the first unknown id; the other waits stop), InvalidJobId,
            InvalidDelay: as wait.
        """
        ids = [_checked_id(job_id) for job_id in _listed(job_ids)]
        seconds = None if timeout is None else parse_duration(timeout, "timeout")
        if not ids:
            return []
        await self._subscribe()
        # The timeout bounds the blocking only: a job that is finished already is returned even
        # with timeout=0 (the reads that tell are not counted).
        deadline = None if seconds is None else asyncio.get_running_loop().time() + seconds
        tasks = [asyncio.ensure_future(self._one(job_id, deadline)) for job_id in ids]
        try:
            return list(await asyncio.gather(*tasks))
        except _Expired as exc:
            late = [
                i for i, t in zip(ids, tasks) if not t.done() or isinstance(t.exception(), _Expired)
            ]
            raise WaitTimeout(
                f"job {ids[0]!r} not finished after {seconds:g} s"
                if len(ids) == 1
                else f"{len(late)} of {len(ids)} jobs not finished after {seconds:g} s "
                f"(the first: {late[0]!r})"
            ) from exc
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _one(self, job_id: str, deadline: float | None) -> JobInfo:
        """Wait for one job (a task of wait_many) until the loop's time `deadline` (None: no
        limit): its own event, set by every message about it."""
        event = asyncio.Event()
        self._events.setdefault(job_id, set()).add(event)
        try:
            state = await self._store.watch_job(job_id)
            if state is None:
                raise JobNotFound(f"no job {job_id!r}", field="job_id")
            info = await self._read(job_id) if state in TERMINAL_STATUSES else None
            while (
                info is None or not info.state.terminal
            ):  # (a finished job retried meanwhile goes on)
                try:
                    async with asyncio.timeout_at(deadline):
                        await event.wait()
                except TimeoutError:
                    raise _Expired from None
                if self._closed:
                    raise SchedulerError(f"the scheduler closed while waiting for job {job_id!r}")
                event.clear()  # before the read: a message after it sets the event again
                info = await self._read(job_id)
            return info
        finally:
            waiting = self._events.get(job_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._events[job_id]

    async def _read(self, job_id: str) -> JobInfo:
        info = await self._store.get_job(job_id)
        if info is None:
            raise JobNotFound(
                f"job {job_id!r} was removed (deleted, or dropped by retention) while waited for",
                field="job_id",
            )
        return info

    async def _subscribe(self) -> None:
        if self._closed:
            raise SchedulerError("the scheduler is closed")
        if self._sub is not None:
            return
        if self._subscribing is None:
            self._subscribing = asyncio.Lock()
        async with self._subscribing:
            if self._sub is None:
                self._sub = await self._store.subscribe_done(self._heard)

    def _heard(self, channel: bytes | None, data: bytes | None) -> None:
        """A waited job ended (data: its id); or (None) the subscription came back after a
        break, when messages may have been lost: every waiter reads its job again."""
        if data is None:
            targets: Iterable[set[asyncio.Event]] = list(self._events.values())
        else:
            found = self._events.get(data.decode(errors="replace"))
            targets = [found] if found else []
        for events in targets:
            for event in events:
                event.set()

    async def aclose(self) -> None:
        """Stop listening; waiters still blocked raise SchedulerError."""
        self._closed = True
        self._heard(None, None)
        if self._sub is not None:
            sub, self._sub = self._sub, None
            await sub.aclose()


class _Expired(Exception):
    """A waiter's deadline passed (wait_many turns it into one WaitTimeout)."""


def _listed(job_ids: Iterable[str]) -> list[str]:
    if isinstance(job_ids, str):  # a single id would wait for each of its characters
        raise InvalidJobId(
            f"job_ids must be a list of job ids, got the str {job_ids!r} (wait() takes one)",
            field="job_ids",
        )
    return list(job_ids)


def _checked_id(job_id: object) -> str:
    checked = check_job_id(job_id)
    if checked is None:
        raise InvalidJobId("job_id must be a job's id, got None", field="job_id")
    return checked
