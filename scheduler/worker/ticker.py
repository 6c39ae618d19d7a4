"""Turn due cron ticks into jobs: read the due schedules (O(due) through the
crons sorted set), plan each in Python (croniter + zoneinfo for an expression,
interval.py for an interval), then fire them in one script call per batch,
guarded so each tick becomes one job."""

from __future__ import annotations

import logging
from functools import lru_cache

from opentelemetry.trace import Tracer

from scheduler.core.clock import Clock
from scheduler.core.config import CronSettings
from scheduler.core.cron import CronSpec, Trigger, cron_job_id, parse_cron, plan_ticks
from scheduler.core.errors import ScheduleError
from scheduler.core.interval import parse_interval
from scheduler.core.job import CronFire
from scheduler.observe.tracing import (
    CRON_NAME,
    MESSAGING_MESSAGE_ID,
    current_traceparent,
    producer_span,
)
from scheduler.store.redis import RedisStore

log = logging.getLogger("horae.cron")


def _tick(tracer: Tracer, row: dict[str, str], tick_ms: int) -> tuple[int, str, str]:
    """(tick, job id, traceparent): each tick is a PRODUCER span in a new trace linked to its
    schedule."""
    job_id = cron_job_id(row["name"], tick_ms)
    attrs = {MESSAGING_MESSAGE_ID: job_id, CRON_NAME: row["name"]}
    with producer_span(
        tracer, row["topic"], "create", attrs, new_trace=True, link_to=row.get("trace", "")
    ):
        return tick_ms, job_id, current_traceparent()


@lru_cache(maxsize=4096)
def _cron_spec(expr: str, tz: str) -> CronSpec:
    """Parsing validates every field with croniter, which is slow: once per distinct expression."""
    return parse_cron(expr, tz)


def _spec(row: dict[str, str]) -> Trigger:
    """A stored schedule's trigger (an interval is cheap to build: no cache)."""
    if row.get("every"):
        return parse_interval(int(row["every"]), int(row.get("jit") or 0), row["name"])
    return _cron_spec(row["expr"], row["tz"])


async def fire_due_crons(
    store: RedisStore, clock: Clock, settings: CronSettings, tracer: Tracer
) -> int:
    """Fire one batch of due schedules; returns the number of jobs created.

    One batch per call: the worker claims (and starts running) the jobs of this batch
    before it fires the next, so 10,000 schedules due at once start running early.
    """
    now = clock.now_ms()
    rows = await store.due_crons(now, settings.fire_batch)
    fires = []
    for row in rows:
        try:
            spec = _spec(row)
        except (
            ScheduleError
        ) as exc:  # stored by an older version with other rules: never spin on it
            log.error(
                "cron %s cannot be parsed, pausing it: %s",
                row["name"],
                exc,
                extra={"event": "cron_invalid"},
            )
            await store.set_cron_paused(row["name"], True, 0, now)
            continue
        expected = int(row["next"])
        if expected > now:  # advanced by another worker between our two reads
            continue
        ticks, new_next = plan_ticks(
            spec,
            expected,
            now,
            misfire=row["misfire"],
            cap=settings.misfire_cap,
            grace_ms=int(settings.misfire_grace_s * 1000),
        )
        if now - expected > settings.misfire_grace_s * 1000:
            log.warning(
                "cron %s missed ticks since %d (misfire=%s): firing %d",
                row["name"],
                expected,
                row["misfire"],
                len(ticks),
                extra={"event": "cron_misfire", "cron": row["name"]},
            )
        fires.append(
            CronFire(row["name"], expected, new_next, tuple(_tick(tracer, row, t) for t in ticks))
        )
    results = await store.fire_crons(fires, now)
    return sum(r for r in results if r > 0)
