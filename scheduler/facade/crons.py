"""Recurring schedules as the facade exposes them: create or update one (its tick job
checked like any job), by schedule_cron or from a declaration beside a listener, pause
and resume it; the trigger arithmetic is `cron.py`'s and `interval.py`'s."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from listeners import Declaration
from scheduler.core.cron import Trigger, next_fire, parse_cron, trigger_of
from scheduler.core.errors import InvalidCron, ScheduleError, shown
from scheduler.core.interval import IntervalSpec, parse_interval
from scheduler.core.job import CronInfo, NewCron, NewJob
from scheduler.core.retry import RetryPolicy
from scheduler.core.validation import check_cron_name, check_misfire
from scheduler.facade.scheduling import Host
from scheduler.observe.tracing import CRON_NAME, current_traceparent, producer_span
from scheduler.store.scripts import PauseCode, ScriptCode

# (topic, run_at_ms, tz, payload, retry, metadata, timeout, job_id, cron, *, key=, priority=)
# -> a checked NewJob.
BuildJob = Callable[..., NewJob]


@dataclass(frozen=True)
class Planned:
    """A checked schedule, not stored yet: its name, trigger, misfire mode and tick template."""

    name: str
    spec: Trigger
    misfire: str
    job: NewJob


class CronSchedules:
    """The cron schedules of one Scheduler; `build` checks a tick's job as schedule_at does."""

    def __init__(self, host: Host, build: BuildJob) -> None:
        self._host = host
        self._build = build

    async def schedule(
        self,
        name: str,
        cron: str,
        topic: str,
        tz: str,
        payload: Any,
        retry: RetryPolicy | Mapping[str, Any] | None,
        metadata: Mapping[str, Any] | None,
        misfire: str | None,
        timeout: timedelta | float | str | None,
        key: str | None = None,
        dedupe: object = None,
        priority: int | str | None = None,
    ) -> CronInfo:
        """Create or update (by name) a recurring schedule; each tick becomes an ordinary job.

        An unchanged expression and zone keep the next run, so every process may call
        this at startup; a changed one recomputes it. Ticks fire exactly once across
        any number of workers (one Lua script fires a tick and advances the schedule).

        Args:
            name: the schedule's unique name (tick job ids are cron:{name}:{tick ms}).
            cron: 5 fields, or 6 with seconds first ("30 30 3 * * *" = 03:30:30).
            topic, tz, payload, retry, metadata, timeout: as for schedule_at, per tick.
            misfire: after downtime: "coalesce" (one run), "skip" (none), "all" (each, capped).
            key: the key of its ticks under the topic's policy (default: the schedule's name,
                so a singleton topic never runs two ticks at once); priority: of its ticks.
            dedupe: Dedupe(key, window=) in throttle mode: a tick is not created while another
                job holds the key (debounce is refused: ticks do not move).

        Returns:
            The stored schedule.

        Raises:
            ScheduleError: a subclass naming the field; nothing is stored.
        """
        host = self._host
        check_cron_name(name)
        mode = check_misfire(misfire or host.settings.cron.misfire)
        spec = parse_cron(cron, tz)
        meta = (
            {**dict(metadata or {}), "cron": name}
            if isinstance(metadata, Mapping) or metadata is None
            else metadata
        )
        job = self._build(
            topic,
            0,
            tz,
            payload,
            retry,
            meta,
            timeout,
            f"cron:{name}",
            name,
            key=key,
            priority=priority,
            dedupe=dedupe,
        )
        if job.dedupe_mode == "debounce":
            raise ScheduleError(
                "dedupe mode 'debounce' is not supported on cron schedules (a tick's time is "
                "fixed); use mode 'throttle'",
                field="dedupe.mode",
            )
        if (
            await self.upsert(Planned(name, spec, mode, job), declared=False)
            == ScriptCode.OTHER_ORIGIN
        ):
            raise InvalidCron(
                f"schedule {name!r} is declared beside a "
                f"listener (@on_event(..., cron= or every=)) "
                "and kept by its workers: change it in the code, or use another name",
                field="name",
            )
        info = await host.store.get_cron(name)
        assert info is not None
        return info

    def plan_declared(self, decl: Declaration) -> Planned:
        """The schedule a declaration stands for, checked as schedule_cron checks (the tick's
        payload against the topic's schema too), defaults from this scheduler's settings.

        Raises:
            ScheduleError: a subclass naming the field; nothing is stored.
        """
        check_cron_name(decl.name)
        mode = check_misfire(decl.misfire or self._host.settings.cron.misfire)
        spec: Trigger = (
            parse_interval(decl.every_ms, decl.jitter_ms, decl.name)
            if decl.every_ms
            else parse_cron(decl.cron, decl.tz)
        )
        job = self._build(
            decl.topic,
            0,
            decl.tz,
            decl.payload,
            None,
            {"cron": decl.name},
            None,
            f"cron:{decl.name}",
            decl.name,
        )
        return Planned(decl.name, spec, mode, job)

    async def upsert(self, plan: Planned, declared: bool) -> int:
        """Store a checked schedule: UpsertCode, or ScriptCode.OTHER_ORIGIN when its name is a
        schedule of the other origin (`declared` beside a listener, or schedule_cron's)."""
        host, spec = self._host, plan.spec
        if isinstance(spec, IntervalSpec):
            expr, every, jitter = "", spec.every_ms, spec.jitter_ms
        else:
            expr, every, jitter = spec.expr, 0, 0
        with producer_span(host.tracer, plan.job.topic, "create", {CRON_NAME: plan.name}):
            now = host.clock.now_ms()
            return await host.store.upsert_cron(
                NewCron(
                    plan.name,
                    expr,
                    plan.misfire,
                    next_fire(spec, now),
                    plan.job,
                    current_traceparent(),
                    every,
                    jitter,
                    declared,
                ),
                now,
            )

    async def set_paused(self, name: str, paused: bool) -> bool:
        """Pause or resume a schedule; a resumed one fires from its next tick after now.

        Returns:
            False when it already was in that state.

        Raises:
            InvalidCron: no schedule has this name.
        """
        host = self._host
        info = await host.store.get_cron(check_cron_name(name))
        if info is None:
            raise InvalidCron(f"no cron schedule named {shown(name)}", field="name")
        now = host.clock.now_ms()
        ms = timedelta(milliseconds=1)
        spec = trigger_of(
            info.cron,
            info.tz,
            (info.every or timedelta()) // ms,
            (info.jitter or timedelta()) // ms,
            name,
        )
        next_ms = next_fire(spec, now)
        return await host.store.set_cron_paused(name, paused, next_ms, now) == PauseCode.CHANGED
