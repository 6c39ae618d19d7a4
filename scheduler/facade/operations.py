"""Job operations on existing jobs (retry, delete, reschedule, cancel, cancel_many),
each one Lua script per job, recorded in the outbox with the actor who asked."""

from __future__ import annotations

import asyncio
import getpass
import os
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Protocol

from scheduler.core.clock import Clock
from scheduler.core.errors import ScheduleError, shown
from scheduler.core.timeutil import resolve_run_at, utc_to_ms
from scheduler.core.validation import check_actor, check_job_ref, check_job_refs
from scheduler.observe.metrics import Metrics
from scheduler.store.redis import RedisStore
from scheduler.store.scripts import CancelCode, OperationCode

# cancel_many sends this many cancel scripts at a time (pipelined on the store's connection).
CANCEL_BATCH = 500


def default_actor() -> str:
    """Who runs this process: `user@host` (the uid when the OS has no name for it)."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name, no passwd entry (a container's bare uid)
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    return f"{user}@{socket.gethostname()}"


class Host(Protocol):
    """What the operations use of their Scheduler (read at each call: connect() sets them later)."""

    @property
    def store(self) -> RedisStore: ...

    @property
    def clock(self) -> Clock: ...

    metrics: Metrics


class JobOperations:
    """The operations of one Scheduler: the store calls, the actor, the metrics.

    The actor of an operation is, first found: its `actor=` argument, the innermost
    `acting_as()` block, the default (`user@host` of this process).
    """

    def __init__(self, host: Host, actor: str | None = None) -> None:
        self._host = host
        self._default = actor
        # Per scheduler (not module-wide): acting_as on one scheduler never names another's actor.
        self._acting: ContextVar[str | None] = ContextVar(f"horae_actor_{id(self)}", default=None)

    def actor(self, given: str | None = None) -> str:
        """The actor an operation records (see the class docstring).

        Raises:
            ScheduleError: field "actor", when `given` is neither None nor a storable string.
        """
        check_actor(given)
        for candidate in (given, self._acting.get(), self._default):
            if isinstance(candidate, str) and candidate.strip():
                return candidate.strip()
        self._default = default_actor()  # resolved once, on first use
        return self._default

    @contextmanager
    def acting_as(self, actor: str) -> Iterator[None]:
        """Record `actor` for the operations of this block (this task and those it starts)."""
        if not isinstance(actor, str):  # (None is the default actor's, not a name given here)
            raise ScheduleError(f"actor must be a string; got {shown(actor)}", field="actor")
        token = self._acting.set(check_actor(actor))
        try:
            yield
        finally:
            self._acting.reset(token)

    async def retry(self, job_id: str, actor: str | None = None) -> bool:
        """Run a failed or cancelled job again now, with a fresh attempt budget (a dead letter
        waits in its dead-letter set again, for a listener of that topic)."""
        job_id, actor = check_job_ref(job_id), self.actor(actor)
        code = await self._host.store.retry_job(
            job_id, self._host.clock.now_ms(), self.actor(actor)
        )
        return code == OperationCode.RETRIED

    async def delete(self, job_id: str, actor: str | None = None) -> bool:
        """Remove a job that is not running (a dead letter too); its id is free again."""
        job_id = check_job_ref(job_id)
        store, now, who = self._host.store, self._host.clock.now_ms(), self.actor(actor)
        held = await store.held_dead_letter_topic(job_id)
        if (
            held is not None
            and await store.delete_dead_letter(job_id, held, now, who) == OperationCode.DELETED
        ):
            return True
        code = await store.delete_job(job_id, now, who)
        return code == OperationCode.DELETED

    async def reschedule(
        self, job_id: str, run_at: datetime, tz: str = "UTC", actor: str | None = None
    ) -> bool:
        """Move a scheduled or retrying job to `run_at` (resolved as schedule_at does; past = now);
        not a dead letter (held, never due)."""
        job_id, actor = check_job_ref(job_id), self.actor(actor)
        run_at_ms = utc_to_ms(resolve_run_at(run_at, tz))
        h = self._host
        if await h.store.held_dead_letter_topic(job_id) is not None:
            return False
        code = await h.store.reschedule_job(
            job_id, run_at_ms, tz, h.clock.now_ms(), self.actor(actor)
        )
        return code == OperationCode.RESCHEDULED

    async def cancel(self, job_id: str, actor: str | None = None) -> bool:
        """Stop all future attempts of one job."""
        return await self.cancel_many([check_job_ref(job_id)], actor) == 1

    async def cancel_many(self, ids: Iterable[str], actor: str | None = None) -> int:
        """Cancel each job (one atomic script per job, pipelined); how many were cancelled."""
        who, unique = self.actor(actor), list(dict.fromkeys(check_job_refs(ids, "ids")))
        cancelled = 0
        for start in range(0, len(unique), CANCEL_BATCH):
            now, batch = self._host.clock.now_ms(), unique[start : start + CANCEL_BATCH]
            codes = await asyncio.gather(*(self._host.store.cancel(i, now, who) for i in batch))
            cancelled += sum(
                1 for c in codes if c in (CancelCode.CANCELLED, CancelCode.CANCELLED_RUNNING)
            )
        if cancelled:
            self._host.metrics.cancelled.add(cancelled)
        return cancelled
