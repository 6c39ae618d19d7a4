"""Listeners of tests/integration/test_process_executor.py, at module level: a child process of the
worker's pool finds them by module + qualname. `registry` runs the CPU-bound ones with
executor="process"; `in_thread` registers the very same functions without it (the worker's
thread pool), to show what the process executor changes; `with_failed` adds a schedule.failed
one."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from listeners import ListenerRegistry, ScheduleArrivedEvent, ScheduleFailedEvent
from scheduler.core.errors import InvalidProgress

registry = ListenerRegistry()
in_thread = ListenerRegistry()

# (job id, started, ended) of `quick`, wall seconds: it runs on the worker's loop, in the test's
# process.
QUICK: list[tuple[str, float, float]] = []
_BALLAST: list[bytearray] = []  # what `grow` keeps in its child, so the child's RSS grows


def _calibrated_chunk(hold_s: float = 0.1) -> int:
    """How many numbers one `sum(range(n))` adds in about `hold_s` on this machine: the GIL hold
    of a step must not depend on the CPU's speed (a fast one held it ~15 ms, too short to show)."""
    n = 1_000_000
    started = time.perf_counter()
    sum(range(n))
    return max(n, int(n * hold_s / max(time.perf_counter() - started, 1e-6)))


_CHUNK = _calibrated_chunk()


def spin(seconds: float) -> None:
    """CPU work for `seconds`, in C calls that hold the GIL for ~100 ms each (as a pandas step or
    an image library often does; pure Python bytecode would hand the GIL over every 5 ms)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(_CHUNK))


def crunch(event: ScheduleArrivedEvent) -> None:
    spin(float(event.payload["seconds"]))


async def quick(event: ScheduleArrivedEvent) -> None:
    started = time.time()
    await asyncio.sleep(0.01)
    QUICK.append((event.scheduled_job_id, started, time.time()))


def whoami(event: ScheduleArrivedEvent) -> None:
    """A sync listener reporting from its child: asyncio.run() of the event's coroutines works
    there."""
    asyncio.run(event.log(f"pid {os.getpid()}"))
    if event.payload and event.payload.get("grow_mb"):
        _BALLAST.append(bytearray(int(event.payload["grow_mb"]) * 1024 * 1024))


async def reporting(event: ScheduleArrivedEvent) -> None:
    await event.progress(40, "rendered 4/10 pages")
    await event.log(f"rendering in pid {os.getpid()}")
    try:
        await event.progress(101)
    except InvalidProgress as exc:  # refused by the worker, raised here in the child
        await event.log(f"refused {exc.field}: {exc}")
    await event.progress(100, "done")


def hangs_first(event: ScheduleArrivedEvent) -> None:
    """Attempt 1 logs its pid and waits until killed (the test kills its child, or its worker); the
    next attempt succeeds."""
    if event.attempt == 1:
        asyncio.run(event.log(f"pid {os.getpid()}"))
        time.sleep(60)


def sleeps(event: ScheduleArrivedEvent) -> None:
    time.sleep(float(event.payload["seconds"]))


class PageError(Exception):
    def __init__(self, page: int) -> None:
        super().__init__(f"page {page} does not render")
        self.page = page


def fails(event: ScheduleArrivedEvent) -> None:
    _render(int(event.payload["page"]))


def _render(page: int) -> Any:
    raise PageError(page)


def on_failed(event: ScheduleFailedEvent) -> None:
    """schedule.failed in a child too: writes its pid where the failed job's metadata says."""
    with open(event.metadata["pid_file"], "w") as f:
        f.write(str(os.getpid()))


for fn in (crunch, whoami, reporting, hangs_first, sleeps, fails):
    registry.add(fn.__name__, fn, executor="process")
    in_thread.add(fn.__name__, fn)
registry.add("quick", quick)
in_thread.add("quick", quick)
# `fails` with a schedule.failed listener in a child too
with_failed = ListenerRegistry()
with_failed.add("fails", fails, executor="process")
with_failed.add("schedule.failed", on_failed, executor="process")


@registry.on_event("returns", executor="process")
def returns(event: ScheduleArrivedEvent) -> Any:
    """Returns the pid of its child (the job's result comes back from the process); with payload
    "lock", on its first attempt, a value pickle cannot send back."""
    if event.payload == "lock" and event.attempt == 1:
        return {"pid": os.getpid(), "lock": threading.Lock()}
    return {"pid": os.getpid(), "payload": event.payload}
