"""The scheduling calls of the Scheduler facade (schedule_at, schedule_in, schedule,
schedule_many): argument handling only; the work is in scheduling.py and bulk.py."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from scheduler.core.clock import caller_now_ms
from scheduler.core.dependencies import ParentFailure
from scheduler.core.flow import Dedupe
from scheduler.core.job import ScheduleResult
from scheduler.core.request import JobRequest
from scheduler.core.retry import RetryPolicy
from scheduler.core.timeutil import parse_duration, resolve_run_at, utc_to_ms
from scheduler.core.validation import check_run_at_ms
from scheduler.facade.bulk import build_jobs, store_jobs

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from scheduler.core.clock import Clock
    from scheduler.facade.scheduling import Scheduling
    from scheduler.observe.metrics import Metrics
    from scheduler.store.redis import RedisStore

# What retry= takes (not `Retry`: that is the public exception a listener raises).
RetryArg = RetryPolicy | Mapping[str, Any] | None
Duration = timedelta | float | str


class ScheduleCalls:
    """Mixed into Scheduler, which provides the attributes below."""

    if TYPE_CHECKING:
        tracer: Tracer
        metrics: Metrics

        # Read-only here because Scheduler provides them as properties (a plain attribute
        # declaration would make them writeable, which a property cannot override).
        @property
        def _scheduling(self) -> Scheduling: ...
        @property
        def clock(self) -> Clock: ...
        @property
        def store(self) -> RedisStore: ...

    async def schedule(
        self,
        topic: str,
        run_at: datetime,
        tz: str = "UTC",
        *,
        payload: Any = None,
        retry: RetryArg = None,
        metadata: Mapping[str, Any] | None = None,
        timeout: Duration | None = None,
        job_id: str | None = None,
        dead_letter: str | None = None,
        key: str | None = None,
        dedupe: Dedupe | None = None,
        priority: int | str | None = None,
        after: Sequence[str] | None = None,
        on_parent_failure: ParentFailure | None = None,
    ) -> ScheduleResult:
        """schedule_at, saying what happened: `created` False when nothing was stored, with
        `job_id` the job holding the slot and `reason` why (ScheduleResult)."""
        when = resolve_run_at(run_at, tz)
        request = JobRequest(
            topic=topic,
            run_at_ms=utc_to_ms(when),
            tz=tz,
            payload=payload,
            retry=retry,
            metadata=metadata,
            timeout=timeout,
            job_id=job_id,
            dead_letter=dead_letter,
            key=key,
            dedupe=dedupe,
            priority=priority,
            after=after,
            on_parent_failure=on_parent_failure,
        )
        return await self._scheduling.enqueue(request)

    async def schedule_at(
        self,
        topic: str,
        run_at: datetime,
        tz: str = "UTC",
        *,
        payload: Any = None,
        retry: RetryArg = None,
        metadata: Mapping[str, Any] | None = None,
        timeout: Duration | None = None,
        job_id: str | None = None,
        dead_letter: str | None = None,
        key: str | None = None,
        dedupe: Dedupe | None = None,
        priority: int | str | None = None,
        after: Sequence[str] | None = None,
        on_parent_failure: ParentFailure | None = None,
    ) -> str:
        """Run every listener of `topic` at `run_at`.

        Args:
            topic: listeners registered with @on_event(topic) run (its schema, if any, checks
                payload).
            run_at: aware datetime, or naive wall-clock time in `tz`; past = now.
            tz: IANA zone name for a naive run_at (and recorded with the job).
            payload: JSON-serializable value for listeners.
            metadata: JSON object kept with the job.
            retry: RetryPolicy or {"attempts": n, "backoff": {"type", "delay", "max_delay",
                "jitter"}} (omitted: the topic's TopicOptions.retry, else the configured default).
            timeout: per-attempt limit (omitted: the topic's, else the configured default).
            job_id: idempotency key.
            dead_letter: topic a copy goes to when the last attempt fails (default: the topic's).
            key: the unit of the topic's policy, per-key rate limit and FIFO
                (docs/how-to/flow-control.md).
            dedupe: Dedupe(key, window=, mode=): a later call with the same key inside the
                window creates nothing (throttle) or moves the waiting job (debounce).
            priority: integer, higher first, or "low"/"normal"/"high" (default: the topic's).
            after: ids of jobs that must complete first: the job waits in state
                waiting_for_parents, then runs at max(run_at, the last parent's completion)
                and reads their results in event.parent_results
                (docs/how-to/dependencies.md).
            on_parent_failure: what a parent failing for good (or cancelled, or deleted) does
                to this job: "fail" (default: it fails with outcome parent_failed, no
                attempt), "ignore" (it counts as done), "cancel".

        Returns:
            The job id; when a dedupe key or the topic's policy kept the job out, the id of
            the job holding its slot (schedule() says which happened).

        Raises:
            ScheduleError: a subclass naming the field; nothing is stored (UnknownParent: a
                job of `after` does not exist).
        """
        result = await self.schedule(
            topic,
            run_at,
            tz,
            payload=payload,
            retry=retry,
            metadata=metadata,
            timeout=timeout,
            job_id=job_id,
            dead_letter=dead_letter,
            key=key,
            dedupe=dedupe,
            priority=priority,
            after=after,
            on_parent_failure=on_parent_failure,
        )
        return result.job_id

    async def schedule_in(
        self,
        topic: str,
        delay: Duration,
        *,
        payload: Any = None,
        retry: RetryArg = None,
        metadata: Mapping[str, Any] | None = None,
        timeout: Duration | None = None,
        job_id: str | None = None,
        tz: str = "UTC",
        dead_letter: str | None = None,
        key: str | None = None,
        dedupe: Dedupe | None = None,
        priority: int | str | None = None,
        after: Sequence[str] | None = None,
        on_parent_failure: ParentFailure | None = None,
    ) -> str:
        """Run `topic` after `delay` (timedelta, seconds, or "30s"/"5m"/"1h30m"/"1d"); the
        other keywords as schedule_at's."""
        seconds = parse_duration(delay, "delay")
        due = check_run_at_ms(self.clock.now_ms() + int(min(seconds, 1e16) * 1000), "delay")
        request = JobRequest(
            topic=topic,
            run_at_ms=due,
            tz=tz,
            payload=payload,
            retry=retry,
            metadata=metadata,
            timeout=timeout,
            job_id=job_id,
            dead_letter=dead_letter,
            key=key,
            dedupe=dedupe,
            priority=priority,
            after=after,
            on_parent_failure=on_parent_failure,
        )
        result = await self._scheduling.enqueue(request)
        return result.job_id

    async def schedule_many(self, items: Iterable[Mapping[str, Any]]) -> list[str]:
        """Schedule many jobs, each item a mapping of schedule_at's keywords (or `delay` instead of
        run_at; neither = now); every item is checked first (`bulk.py`). The ids, in item order.

        Raises:
            ScheduleError: the item's, e.g. field "items[3].topic"; nothing is stored.
            StorageError: Redis failed; earlier batches may be stored (retry with job_ids).
        """
        now = self.clock.now_ms()
        build = partial(self._scheduling.build_job, now_ms=now, due_by_ms=caller_now_ms(self.clock))
        jobs = build_jobs(items, build, now)
        return await store_jobs(self.store, self.tracer, self.metrics, jobs, now)
