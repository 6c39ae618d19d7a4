"""The listener of the flow tests on real worker processes
(tests/integration/test_flows_multiprocess.py): `horae worker --app
tests.procs.flow_app:registry`. Every node of a test's flows is a job of NODE_TOPIC; each run
records its own start and end in the worker's namespace (cleaned up with it):

    {ns}:test:flow_seq   counter  INCR'd at each start and end: one order over every process
    {ns}:test:flow_runs  list     JSON {what: start|end, job, attempt, pid, seq} and, for an
                                  end, ok, kids (event.children_results) and result

The payload says what a run does: {"n": its number, "sleep": seconds, "fail": how many first
attempts fail, "hang": seconds attempt 1 sleeps (the test SIGKILLs its worker meanwhile)}. A
run returns {"n": n, "total": n + the children's totals}: the root's total is the sum of every
node's n only when each parent saw all of its children's results.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from listeners import ListenerRegistry, ScheduleArrivedEvent
from tests.procs.worker_app import _redis_ready, key

NODE_TOPIC = "flows.node"

registry = ListenerRegistry()


async def _record(what: str, event: ScheduleArrivedEvent, **fields: Any) -> None:
    """One record, its seq taken from the shared counter when it is written."""
    client = await _redis_ready()
    seq = await client.incr(key("flow_seq"))
    entry = {
        "what": what,
        "job": event.scheduled_job_id,
        "attempt": event.attempt,
        "pid": os.getpid(),
        "seq": seq,
        **fields,
    }
    await client.rpush(key("flow_runs"), json.dumps(entry))


@registry.on_event(NODE_TOPIC)
async def node(event: ScheduleArrivedEvent) -> dict[str, int]:
    """Record the start, work (sleep), record the end; fail the first payload["fail"] attempts."""
    p: dict[str, Any] = event.payload if isinstance(event.payload, dict) else {}
    await _record("start", event)
    if event.attempt == 1 and p.get("hang"):
        await asyncio.sleep(float(p["hang"]))
    await asyncio.sleep(float(p.get("sleep", 0)))
    kids = dict(event.children_results)
    ok = event.attempt > int(p.get("fail", 0))
    n = int(p.get("n", 0))
    result = {"n": n, "total": n + sum(int(v["total"]) for v in kids.values())} if ok else None
    await _record("end", event, ok=ok, kids=kids, result=result)
    if result is None:
        raise ValueError(f"attempt {event.attempt} of node {n} fails on purpose")
    return result
