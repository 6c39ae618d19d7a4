"""Bulk scheduling (Scheduler.schedule_many): every item checked and built into a
NewJob before anything is written (errors name the item), then stored in
pipelined batches under one PRODUCER span (RedisStore.enqueue_many)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Span, Tracer

from scheduler.core.errors import InvalidDelay, InvalidJobId, ScheduleError, shown
from scheduler.core.job import NewJob
from scheduler.core.request import JobRequest
from scheduler.core.timeutil import parse_duration, resolve_run_at, utc_to_ms
from scheduler.core.validation import check_run_at_ms
from scheduler.facade.scheduling import observe
from scheduler.observe.metrics import Metrics
from scheduler.observe.tracing import current_traceparent, is_noop, producer_span

if TYPE_CHECKING:
    from scheduler.store.redis import RedisStore

# The keys an item may hold: schedule_at's keywords, plus schedule_in's `delay`.
ITEM_KEYS = (
    "topic",
    "run_at",
    "delay",
    "tz",
    "payload",
    "retry",
    "metadata",
    "timeout",
    "job_id",
    "key",
    "dedupe",
    "priority",
    "dead_letter",
    "after",
    "on_parent_failure",
)
_KNOWN = frozenset(ITEM_KEYS)


# Validate one request and build its job (the facade's, with its defaults and schemas).
BuildJob = Callable[[JobRequest], NewJob]


def build_jobs(items: Iterable[Mapping[str, Any]], build: BuildJob, now_ms: int) -> list[NewJob]:
    """Every item as a job, in order.

    Each item holds schedule_at's keywords (topic, run_at, tz, payload, retry, metadata,
    timeout, job_id) or `delay` instead of run_at; neither means now (`now_ms`).

    Raises:
        ScheduleError: the subclass the item's check raised, its field and message
            prefixed with the item ("items[3].topic"); an unknown key or a job_id given
            twice in the call is refused the same way.
    """
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise ScheduleError(
            f"items must be a list (an iterable) of mappings of schedule_at's keywords; got "
            f"{type(items).__name__}",
            field="items",
        )
    jobs: list[NewJob] = []
    first_of: dict[str, int] = {}  # a caller's job_id -> the item that gave it first
    for index, item in enumerate(items):
        job = _build_one(index, item, build, now_ms)
        if item.get("job_id") is not None:
            earlier = first_of.setdefault(job.id, index)
            if earlier != index:
                raise _at(
                    index,
                    InvalidJobId(
                        f"job_id {shown(job.id)} is also items[{earlier}]'s", field="job_id"
                    ),
                )
        jobs.append(job)
    return jobs


def _build_one(index: int, item: object, build: BuildJob, now_ms: int) -> NewJob:
    if not isinstance(item, Mapping):
        raise ScheduleError(
            f"items[{index}]: must be a mapping of schedule_at's keywords; got {shown(item)}",
            field=f"items[{index}]",
        )
    for key in item:
        if key not in _KNOWN:
            raise ScheduleError(
                f"items[{index}].{key}: unknown key {shown(key)} (known: {', '.join(ITEM_KEYS)})",
                field=f"items[{index}].{key}",
            )
    try:
        return build(item_request(item, now_ms))
    except ScheduleError as exc:
        raise _at(index, exc) from exc


def item_request(item: Mapping[str, Any], now_ms: int) -> JobRequest:
    """The request of one mapping of schedule_at's keywords (`delay` instead of run_at; neither:
    `now_ms`), its values unchecked but for run_at and delay.

    Raises:
        ScheduleError: run_at and delay both given, or either out of bounds.
    """
    tz = item.get("tz", "UTC")
    if item.get("run_at") is not None:
        if item.get("delay") is not None:
            raise InvalidDelay("give run_at or delay, not both", field="delay")
        run_at_ms = utc_to_ms(resolve_run_at(item["run_at"], tz))
    elif item.get("delay") is not None:
        run_at_ms = check_run_at_ms(
            now_ms + int(min(parse_duration(item["delay"], "delay"), 1e16) * 1000), "delay"
        )
    else:
        run_at_ms = now_ms
    return JobRequest(
        topic=item.get("topic"),
        run_at_ms=run_at_ms,
        tz=tz,
        payload=item.get("payload"),
        retry=item.get("retry"),
        metadata=item.get("metadata"),
        timeout=item.get("timeout"),
        job_id=item.get("job_id"),
        dead_letter=item.get("dead_letter"),
        key=item.get("key"),
        dedupe=item.get("dedupe"),
        priority=item.get("priority"),
        after=item.get("after"),
        on_parent_failure=item.get("on_parent_failure"),
    )


def _at(index: int, exc: ScheduleError) -> ScheduleError:
    """The same error class, its field and message prefixed with the item."""
    field = f"items[{index}].{exc.field}" if exc.field else f"items[{index}]"
    return type(exc)(f"{field}: {exc}", field=field)


async def store_jobs(
    store: RedisStore, tracer: Tracer, metrics: Metrics, jobs: Sequence[NewJob], now_ms: int
) -> list[str]:
    """Store built jobs (RedisStore.enqueue_many) under one PRODUCER span for the call, not
    one per job (its cost would be most of a job's); every job keeps that span's context
    as its trace, so its attempts join the call's trace. Returns the ids in order (a
    job a dedupe or its topic's policy kept out: the id of the job holding its slot)."""
    if not jobs:
        return []
    topics = {job.topic for job in jobs}
    span: AbstractContextManager[Span | None] = (
        nullcontext()
        if is_noop(tracer)
        else producer_span(tracer, next(iter(topics)) if len(topics) == 1 else "(multiple)", "send")
    )
    with span:
        trace = current_traceparent()
        if trace:
            jobs = [job.with_trace(trace) for job in jobs]
        done = await store.enqueue_many(jobs, now_ms)
    for job, one in zip(jobs, done):
        observe(metrics, job.topic, one)
    return [one.result.job_id for one in done]
