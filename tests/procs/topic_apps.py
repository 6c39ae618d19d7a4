"""Two listener modules in one file for the worker-topics test: worker A runs
`horae worker --app tests.procs.topic_apps:registry_a` (listens to A_TOPIC only),
worker B `...:registry_b` (B_TOPIC only). Each run is recorded in the worker's
namespace (cleaned up with it):

    {ns}:test:ran_by   hash  job id -> pid of the process that ran it (last run)
    {ns}:test:runs     hash  job id -> how many times a listener ran it
"""

from __future__ import annotations

import os

from listeners import ListenerRegistry, ScheduleArrivedEvent
from tests.procs.worker_app import _redis_ready, key

A_TOPIC = "a.topic"
B_TOPIC = "b.topic"

registry_a = ListenerRegistry()
registry_b = ListenerRegistry()


async def _record(event: ScheduleArrivedEvent) -> None:
    pipe = (await _redis_ready()).pipeline(transaction=True)
    pipe.hset(key("ran_by"), event.scheduled_job_id, str(os.getpid()))
    pipe.hincrby(key("runs"), event.scheduled_job_id, 1)
    await pipe.execute()


@registry_a.on_event(A_TOPIC)
async def run_a(event: ScheduleArrivedEvent) -> None:
    await _record(event)


@registry_b.on_event(B_TOPIC)
async def run_b(event: ScheduleArrivedEvent) -> None:
    await _record(event)


# The rolling-deploy tests (test_topic_memory.py): `...:registry_slow` is the only worker of
# SLOW_TOPIC; its listener marks the job started ({ns}:test:started) and sleeps the payload's
# "sleep" seconds on a job's first run only, then records the run like the others.
SLOW_TOPIC = "probe.slow"
registry_slow = ListenerRegistry()


@registry_slow.on_event(SLOW_TOPIC)
async def run_slow(event: ScheduleArrivedEvent) -> None:
    import asyncio

    client = await _redis_ready()
    first = await client.hincrby(key("started"), event.scheduled_job_id, 1) == 1
    if first:
        await asyncio.sleep(float((event.payload or {}).get("sleep", 0)))
    await _record(event)
