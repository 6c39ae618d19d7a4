"""`horae demo`: the main job end to end on the embedded servers, in under a
minute: listeners that succeed, recover, fail for good, and a topic nobody
listens to, scheduled as wall-clock times in two zones."""

from __future__ import annotations

import asyncio
import shlex
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from rich.console import Console
from rich.table import Table

from horae.settings import Settings
from listeners import ListenerRegistry, ScheduleArrivedEvent, ScheduleFailedEvent
from scheduler.api import Scheduler
from scheduler.core.job import JobInfo
from scheduler.core.outbox import SCHEDULE_FAILED_TOPIC

FAST_RETRY = {"attempts": 3, "backoff": {"type": "fixed", "delay": 1000}}
DEFAULT_NAMESPACE: str = Settings.model_fields["namespace"].default


def suggested_commands(namespace: str, job_id: str, audit: bool) -> list[str]:
    """Commands to look further at the demo's jobs; each names the demo's namespace
    (unless it is the default one) so it works when pasted."""
    ns = "" if namespace == DEFAULT_NAMESPACE else f" --namespace {shlex.quote(namespace)}"
    commands = [f"horae{ns} jobs show {job_id}", f"horae{ns} jobs stats"]
    return ([f"horae{ns} audit show {job_id}"] if audit else []) + commands


def demo_registry(failures: list[ScheduleFailedEvent]) -> ListenerRegistry:
    """Four behaviours: succeed, fail twice then succeed, always fail; plus schedule.failed."""
    reg = ListenerRegistry()

    @reg.on_event("billing.remind")
    async def remind(event: ScheduleArrivedEvent) -> None:
        await asyncio.sleep(0.05)

    @reg.on_event("payments.charge")
    async def charge(event: ScheduleArrivedEvent) -> None:
        if event.attempt < 3:
            raise ConnectionError(f"payment gateway timeout (attempt {event.attempt})")

    @reg.on_event("reports.export")
    async def export(event: ScheduleArrivedEvent) -> None:
        raise ValueError(f"report template {event.payload['template']!r} not found")

    @reg.on_event(SCHEDULE_FAILED_TOPIC)
    async def on_failed(event: ScheduleFailedEvent) -> None:
        failures.append(event)

    return reg


def _wall(seconds_ahead: float, tz: str) -> datetime:
    """A naive wall-clock time `seconds_ahead` from now in zone `tz`."""
    return (
        (datetime.now(UTC) + timedelta(seconds=seconds_ahead))
        .astimezone(ZoneInfo(tz))
        .replace(tzinfo=None, microsecond=0)
    )


async def run_demo(settings: Settings, console: Console, deadline_s: float = 45.0) -> list[JobInfo]:
    """Schedule the demo jobs, run a worker until they settle, print what happened."""
    failures: list[ScheduleFailedEvent] = []
    demo_settings = settings.model_copy(update={"namespace": f"{settings.namespace}-demo"})
    async with Scheduler(settings=demo_settings, listeners=demo_registry(failures)) as s:
        console.print(f"[bold]servers[/]: {s.services.describe()}")
        plan = [
            ("billing.remind", "Europe/Berlin", 2, {"invoiceId": "i-1"}),
            ("payments.charge", "America/New_York", 2, {"invoiceId": "i-2", "amount": 4200}),
            ("reports.export", "Europe/Berlin", 3, {"template": "q3-summary"}),
            ("audit.ping", "America/New_York", 3, {}),
        ]
        ids = []
        for topic, tz, ahead, payload in plan:
            wall = _wall(ahead, tz)
            ids.append(
                await s.schedule_at(
                    topic, wall, tz=tz, payload=payload, retry=FAST_RETRY, metadata={"demo": True}
                )
            )
            console.print(f"scheduled [cyan]{topic}[/] at {wall:%H:%M:%S} {tz}")
        started = time.monotonic()
        async with s.worker(concurrency=10):
            while time.monotonic() - started < deadline_s:
                states = [await s.get_job(j) for j in ids]
                if all(i is not None and i.state.terminal for i in states):
                    break
                await asyncio.sleep(0.2)
        infos = [i for i in [await s.get_job(j) for j in ids] if i is not None]
        audit: dict[str, tuple[str, int]] = {}
        if s.settings.audit.enabled and s.settings.audit.relay:
            await s.audit.flush(timeout=20)
            for info in infos:
                row = await s.audit.get(info.id)
                audit[info.id] = (
                    (row.status, len(await s.audit.attempts(info.id))) if row else ("-", 0)
                )
        console.print(_table(infos, audit))
        console.print(
            f"schedule.failed events received: {[f.to_dict()['topic'] for f in failures]}"
        )
        console.print(
            f"settled in {time.monotonic() - started:.1f} s; "
            f"this run's {len(infos)} jobs: {run_counts(infos)}"
        )
        console.print(f"look further (the demo's jobs are in namespace {s.settings.namespace!r}):")
        for command in suggested_commands(s.settings.namespace, infos[-2].id, bool(audit)):
            console.print(f"  {command}", markup=False, highlight=False, soft_wrap=True)
        return infos


def run_counts(infos: list[JobInfo]) -> str:
    """e.g. 'completed 3, failed 1': the states of this run's jobs only (the demo namespace
    keeps the jobs of earlier runs until retention prunes them; they are not this run's)."""
    counts = Counter(info.state.value for info in infos)
    return ", ".join(f"{state} {n}" for state, n in sorted(counts.items())) or "none"


_COLUMNS = (
    "job",
    "topic",
    "run at (zone)",
    "state",
    "attempts",
    "last error",
    "audit (Postgres)",
)


def _table(infos: list[JobInfo], audit: dict[str, tuple[str, int]]) -> Table:
    table = Table(*_COLUMNS, title="What happened")
    for info in infos:
        error = info.last_error or {}
        status, rows = audit.get(info.id, ("-", 0))
        cells = (
            info.id,
            info.topic,
            f"{info.run_at.astimezone(ZoneInfo(info.tz)):%H:%M:%S} {info.tz}",
            info.state.value,
            f"{info.attempts}/{info.max_attempts}",
            f"{error.get('type', '')}: {error.get('message', '')}" if error else "",
            f"{status}, {rows} attempt row{'' if rows == 1 else 's'}",
        )
        table.add_row(*cells)
    return table
