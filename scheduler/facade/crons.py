"""Recurring schedules as the facade exposes them: create or update one (its tick job
checked like any job), by schedule_cron or from a declaration beside a listener, pause
and resume it; the trigger arithmetic is `cron.py`'s and `interval.py`'s."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta

from listeners import Declaration
from scheduler.core.cron import Trigger, next_fire, parse_cron, trigger_of
from scheduler.core.errors import InvalidCron, ScheduleError, shown
from scheduler.core.interval import IntervalSpec, parse_interval
from scheduler.core.job import CronInfo, NewCron, NewJob
from scheduler.core.request import JobRequest
from scheduler.core.validation import check_cron_name, check_misfire
from scheduler.facade.scheduling import Host
from scheduler.observe.tracing import CRON_NAME, current_traceparent, producer_span
from scheduler.store.scripts import PauseCode, ScriptCode

# A request -> its checked NewJob (the facade's Scheduling.build_job).
BuildJob = Callable[[JobRequest], NewJob]


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
        self, name: str, cron: str, request: JobRequest, misfire: str | None
    ) -> CronInfo:
        """Create or update (by name) a recurring schedule; each tick becomes an ordinary job.

        An unchanged expression and zone keep the next run, so every process may call
        this at startup; a changed one recomputes it. Ticks fire exactly once across
        any number of workers (one Lua script fires a tick and advances the schedule).

        Args:
            name: the schedule's unique name (tick job ids are cron:{name}:{tick ms}).
            cron: 5 fields, or 6 with seconds first ("30 30 3 * * *" = 03:30:30).
            request: each tick's topic, tz, payload, retry, metadata, timeout as for
                schedule_at; key: the key of its ticks under the topic's policy (default: the
                schedule's name, so a singleton topic never runs two ticks at once); priority:
                of its ticks; dedupe: Dedupe(key, window=) in throttle mode: a tick is not
                created while another job holds the key (debounce is refused: ticks do not
                move). Its run_at_ms, job_id and cron are the schedule's own.
            misfire: after downtime: "coalesce" (one run), "skip" (none), "all" (each, capped).

        Returns:
            The stored schedule.

        Raises:
            ScheduleError: a subclass naming the field; nothing is stored.
        """
        host = self._host
        check_cron_name(name)
        mode = check_misfire(misfire or host.settings.cron.misfire)
        spec = parse_cron(cron, request.tz)
        metadata = request.metadata
        meta = (
            {**dict(metadata or {}), "cron": name}
            if isinstance(metadata, Mapping) or metadata is None
            else metadata
        )
        job = self._build(
            replace(request, run_at_ms=0, metadata=meta, job_id=f"cron:{name}", cron=name)
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
            JobRequest(
                topic=decl.topic,
                tz=decl.tz,
                payload=decl.payload,
                metadata={"cron": decl.name},
                job_id=f"cron:{decl.name}",
                cron=decl.name,
            )
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
                    name=plan.name,
                    expr=expr,
                    misfire=plan.misfire,
                    next_ms=next_fire(spec, now),
                    job=plan.job,
                    trace=current_traceparent(),
                    every_ms=every,
                    jitter_ms=jitter,
                    declared=declared,
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
