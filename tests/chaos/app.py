"""The listeners the chaos run's worker processes run (`--app tests.chaos.app:registry`).

Every run is written to a side file of the worker process, never to Redis (which the
run kills): CHAOS_RUNS_DIR/runs-<pid>.jsonl, one JSON line per event, appended with a
single write(2) each, so a SIGKILL loses nothing already written:

    {"j": job id, "a": attempt, "p": pid, "e": "start" | "end" | "raise", "t": wall-clock ms}

`t` is read from CLOCK_REALTIME, not time.time(): the worker launcher (tests/chaos/worker.py)
moves time.time() of a skewed worker, and the checker compares these times across processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from listeners import ListenerRegistry, ScheduleArrivedEvent

registry = ListenerRegistry()

OK, FAIL_ONCE, DOOMED, SLOW, CRON = (
    "chaos.ok",
    "chaos.fail_once",
    "chaos.doomed",
    "chaos.slow",
    "chaos.cron",
)
TOPICS = (OK, FAIL_ONCE, DOOMED, SLOW, CRON)
# The topic only the "solo" worker serves (`--app tests.chaos.app:solo_registry`), restarted by
# the plan's rolling restarts: its jobs must wait for it, never complete as no_listener.
SOLO_TOPIC = "chaos.solo"
solo_registry = ListenerRegistry()

_fd: int | None = None


def real_ms() -> int:
    """Wall-clock ms from the kernel, whatever a skewed worker did to time.time()."""
    return time.clock_gettime_ns(time.CLOCK_REALTIME) // 1_000_000


def _record(event: ScheduleArrivedEvent, what: str) -> None:
    global _fd
    if _fd is None:
        path = os.path.join(os.environ["CHAOS_RUNS_DIR"], f"runs-{os.getpid()}.jsonl")
        _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    line = {
        "j": event.scheduled_job_id,
        "a": event.attempt,
        "p": os.getpid(),
        "e": what,
        "t": real_ms(),
    }
    os.write(_fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())


async def _run(event: ScheduleArrivedEvent, fail: bool) -> None:
    _record(event, "start")
    payload = event.payload if isinstance(event.payload, dict) else {}
    await asyncio.sleep(float(payload.get("sleep", 0)))
    if fail:
        _record(event, "raise")
        raise RuntimeError(f"chaos: attempt {event.attempt} of {event.topic} fails")
    _record(event, "end")


@registry.on_event(OK)
async def ok(event: ScheduleArrivedEvent) -> None:
    await _run(event, fail=False)


@registry.on_event(SLOW)
async def slow(event: ScheduleArrivedEvent) -> None:
    """Sleeps longer than the lease (payload["sleep"]): the heartbeat must keep it."""
    await _run(event, fail=False)


@registry.on_event(FAIL_ONCE)
async def fail_once(event: ScheduleArrivedEvent) -> None:
    await _run(event, fail=event.attempt == 1)


@registry.on_event(DOOMED)
async def doomed(event: ScheduleArrivedEvent) -> None:
    await _run(event, fail=True)


@registry.on_event(CRON)
async def tick(event: ScheduleArrivedEvent) -> None:
    await _run(event, fail=False)


@solo_registry.on_event(SOLO_TOPIC)
async def solo(event: ScheduleArrivedEvent) -> None:
    await _run(event, fail=False)
