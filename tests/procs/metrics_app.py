"""The documented deployment of the dashboard test: a worker process
(`horae worker --app tests.procs.metrics_app:registry --metrics-port P`) and a
producer process (`python -m tests.procs.metrics_app`, its [telemetry] from the
environment: HORAE_TELEMETRY__METRICS_PORT), each serving its own metrics.

The producer reads one line per wave from stdin and answers `done` once the wave's
jobs are finished: OK_JOBS of "ok" (completes), BAD_JOBS of "bad" (fails, one retry
1 s later, then fails for good), one of "nobody" (no listener anywhere: completes
as no_listener), and one "ok" job an hour away that it cancels.
"""

from __future__ import annotations

import asyncio
import sys

import scheduler
from listeners import ListenerRegistry, ScheduleArrivedEvent

registry = ListenerRegistry()
OK_JOBS = 5
BAD_JOBS = 2
RETRY = {"attempts": 2, "backoff": {"type": "fixed", "delay": 1000}}

print(f"horae code: {scheduler.__file__}", file=sys.stderr, flush=True)


@registry.on_event("ok")
async def ok(event: ScheduleArrivedEvent) -> None:
    return None


@registry.on_event("bad")
async def bad(event: ScheduleArrivedEvent) -> None:
    raise RuntimeError("always fails")


async def wave(s: scheduler.Scheduler) -> None:
    """Schedule one wave and wait until its jobs are finished."""
    ids = [await s.schedule_in("ok", 0) for _ in range(OK_JOBS)]
    ids += [await s.schedule_in("bad", 0, retry=RETRY) for _ in range(BAD_JOBS)]
    ids.append(await s.schedule_in("nobody", 0))
    assert await s.cancel(await s.schedule_in("ok", "1h"))
    for job_id in ids:
        for _ in range(600):
            info = await s.get_job(job_id)
            if info is not None and info.state.terminal:
                break
            await asyncio.sleep(0.05)
        else:
            raise TimeoutError(f"job {job_id} did not finish: {info}")


async def main() -> None:
    """Schedule a wave per stdin line; print `done` after each (the test scrapes then)."""
    async with scheduler.Scheduler(listeners=ListenerRegistry()) as s:
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        while await loop.run_in_executor(None, sys.stdin.readline):
            await wave(s)
            print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
