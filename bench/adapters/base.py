"""The one interface every system under test implements (one small module per system).

A scenario only ever talks to an Adapter. The handler each adapter registers is
the same for all: it takes `time.time()` first thing, then calls the scenario's
`on_run(payload, started)`; a True return means "fail this run" and the adapter
raises whatever makes its system retry after the fixed retry delay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# on_run(payload, handler_start_epoch_s) -> True when this run must fail (retry scenario)
OnRun = Callable[[dict[str, Any], float], bool]

QUEUE = "bench"  # queue / namespace name used by every system
TOPIC = "bench.job"  # horae topic / peer function name
RETRY_DELAY_S = 1.0  # the retry scenario's fixed delay, identical for every system
RETRY_ATTEMPTS = 2  # fail once, then succeed


class NotAvailable(Exception):
    """The system cannot run this variant (e.g. audit not wired yet); the reason is reported."""


@dataclass
class Job:
    """One job to enqueue: its payload and, for delayed jobs, the due instant (epoch s)."""

    payload: dict[str, Any]
    due: float | None = None
    retry: bool = False
    priority: int | None = None  # horae's scale: higher runs first (drain_priority uses -1, 0, 1)


class Adapter:
    """Same interface for every system. Producer and worker share one process and loop."""

    name = "?"
    supports_bulk = False
    supports_priority = False  # Job.priority honoured (drain_priority); else that scenario is n/a

    def __init__(self, redis_url: str, on_run: OnRun, options: dict[str, Any]) -> None:
        self.redis_url = redis_url
        self.on_run = on_run
        self.options = options

    def versions(self) -> dict[str, str]:
        """Package versions that matter for this system."""
        raise NotImplementedError

    def settings(self) -> dict[str, Any]:
        """Every setting used (defaults included), printed with the results."""
        raise NotImplementedError

    async def connect(self) -> None:
        raise NotImplementedError

    async def enqueue(self, job: Job) -> None:
        """Enqueue one job (one await)."""
        raise NotImplementedError

    async def enqueue_bulk(self, jobs: Sequence[Job]) -> None:
        """Enqueue many jobs with the system's bulk API (only when supports_bulk)."""
        raise NotImplementedError

    async def start_worker(self, concurrency: int) -> None:
        raise NotImplementedError

    async def set_rate_limit(self, max_jobs: int, per_s: float) -> None:
        """At most `max_jobs` job starts per `per_s` seconds for the bench topic (rate_limited),
        set before the jobs are enqueued and the worker starts. NotAvailable without one."""
        raise NotAvailable("n/a (no rate limiter)")

    async def stop_worker(self) -> None:
        raise NotImplementedError

    def processes(self) -> list[int]:
        """Pids of helper processes this system runs besides the driver's (horae+audit-proc: its
        relay process), started by connect(): their CPU in the measured window counts."""
        return []

    async def finish(self) -> None:
        """Work that belongs inside the measured time once every handler ran (horae: audit
        flush)."""

    async def settle(self) -> None:
        """Finish untimed setup work before the clock starts (horae: relay the pre-enqueued
        jobs' audit events, so a timed drain flush does not include them)."""

    async def close(self) -> None:
        raise NotImplementedError


def pkg_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"
