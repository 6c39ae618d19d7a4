"""Draining one worker remotely (`horae workers drain ID`, `Scheduler.drain_worker`): the request
is one write in the worker's registry entry, seen at its next heartbeat; the worker then stops
claiming, turns unready, lets its running attempt finish, leaves the registry and exits 0. An
embedded worker stops the same way (its stop()), observable by the app. A real `horae worker`
subprocess with a 6 s attempt, a second worker that takes the job scheduled after the request."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler.core.errors import ScheduleError
from scheduler.core.job import JobState
from scheduler.core.keys import Keys
from scheduler.ops.servers import free_port as _free_port
from scheduler.store.scripts import DrainCode
from scheduler.testing.under_test import delete_namespace
from scheduler.worker.advertise import entry_json
from tests.integration.engine_fixtures import START_MS, eventually, make_scheduler
from tests.integration.test_health_probes import _until
from tests.procs import HORAE, WorkerProcesses, app_key, producer
from tests.procs.worker_app import BLOCK_TOPIC

TTL = 10_000
# A heartbeat a second (min(lease, registry TTL) / 3): the drain is seen within about that.
FAST_BEAT = {"HORAE_WORKER__LEASE_MS": "3000", "HORAE_WORKER__REGISTRY_TTL_MS": "3000"}


async def test_request_drain_marks_a_live_entry_once_and_refuses_an_unknown_or_dead_one(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        store, k = s.store, Keys(namespace)
        await store.advertise_worker(
            "A", entry_json(["a"], 2, 0, False, 1, START_MS, TTL, host="h"), ["a"], START_MS, TTL
        )
        await store.advertise_worker(
            "dead",
            entry_json(["d"], 2, 0, False, 1, START_MS - TTL, TTL, host="h"),
            ["d"],
            START_MS - TTL,
            TTL,
        )
        before = await redis.hgetall(k.workers)
        assert await store.request_drain("nobody", START_MS) is DrainCode.NO_WORKER
        assert await store.request_drain("dead", START_MS) is DrainCode.NO_WORKER
        assert await redis.hgetall(k.workers) == before, "a refused request writes nothing"
        assert await store.request_drain("A", START_MS + 5) is DrainCode.REQUESTED
        assert await store.request_drain("A", START_MS + 9) is DrainCode.ALREADY
        [info] = await s.workers()
        assert (info.id, info.state, info.draining) == ("A", "draining", True)
        assert info.drain_requested_at is not None and info.topics == ("a",)
        # The worker's next heartbeat keeps the request and learns of it.
        done = await store.advertise_worker(
            "A",
            entry_json(["a"], 2, 1, False, 1, START_MS + 10, TTL, host="h"),
            ["a"],
            START_MS + 10,
            TTL,
        )
        assert done.drain_ms == START_MS + 5
        assert json.loads(await redis.hget(k.workers, "A"))["drain_ms"] == START_MS + 5
        assert [(w.id, w.state, w.running) for w in await s.workers()] == [("A", "draining", 1)]
        with pytest.raises(ScheduleError) as bad:
            await s.drain_worker("")  # type: ignore[arg-type]
        assert bad.value.field == "worker_id"
        assert await s.drain_worker("\x85") is False, (
            "an id no live worker has, whatever its characters"
        )


async def test_an_embedded_worker_drains_its_running_attempt_and_stops_itself(
    redis_url: str, namespace: str
) -> None:
    registry = ListenerRegistry()
    release = asyncio.Event()
    ran: list[str] = []

    @registry.on_event("drain.slow")
    async def slow(event: ScheduleArrivedEvent) -> None:
        await release.wait()
        ran.append(event.scheduled_job_id)

    async with make_scheduler(
        redis_url, namespace, registry, worker={"lease_ms": 900, "registry_ttl_ms": 900}
    ) as s:
        async with s.worker(concurrency=2, grace=30) as w:
            seen: list[str] = []
            w.on_drain = seen.append
            job = await s.schedule_in("drain.slow", 0)
            await eventually(lambda: _in(s, job, JobState.RUNNING), what="the attempt runs")
            assert await s.drain_worker(w.id) is True
            assert [x.state for x in await s.workers()] == ["draining"]
            await eventually(
                lambda: _true(w.draining), timeout=5, what="the worker saw the request"
            )
            assert seen and w.id in seen[0] and not w.stopped
            later = await s.schedule_in(
                "drain.slow", 0
            )  # claimed by nobody: its only worker drains
            await asyncio.sleep(0.5)
            assert (await s.get_job(later)).state is JobState.SCHEDULED  # type: ignore[union-attr]
            [listed] = await s.workers()  # listed while it drains, serving nothing
            assert (listed.state, listed.running) == ("draining", 1)
            release.set()
            await asyncio.wait_for(w.wait_stopped(), 10)
            assert w.stopped and ran == [job]
            assert await s.workers() == []
            assert await s.drain_worker(w.id) is False  # gone: no live worker has that id
        assert (await s.get_job(job)).state is JobState.COMPLETED  # type: ignore[union-attr]


async def test_a_partitioned_worker_drains_on_every_partition_together(
    redis_url: str, namespace: str
) -> None:
    """One worker id on 3 partitions: the request marks each partition's entry; whichever loop sees
    it first stops them all, and the app's hook hears of it once."""
    registry = ListenerRegistry()

    @registry.on_event("drain.p")
    async def noop(event: ScheduleArrivedEvent) -> None:
        return None

    try:
        async with make_scheduler(
            redis_url,
            namespace,
            registry,
            cluster={"partitions": 3},
            worker={"lease_ms": 900, "registry_ttl_ms": 900},
        ) as s:
            async with s.worker() as w:
                heard: list[str] = []
                w.on_drain = heard.append
                assert len(w.workers) == 3 and [x.id for x in await s.workers()] == [w.id]
                assert await s.drain_worker(w.id) is True
                assert (
                    await s.drain_worker(w.id) is True
                )  # (already asked: still True, nothing new)
                await asyncio.wait_for(w.wait_stopped(), 10)
                assert (
                    w.draining
                    and w.stopped
                    and all(x.stopped for x in w.workers)
                    and len(heard) == 1
                )
                assert await s.workers() == []
    finally:
        await delete_namespace(redis_url, namespace)


async def _in(s: Any, job_id: str, state: JobState) -> bool:
    info = await s.get_job(job_id)
    return info is not None and info.state is state


async def _true(value: bool) -> bool:
    return value


def _horae(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HORAE), *args],
        env={**env, "COLUMNS": "250"},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def _events(client: aioredis.Redis, namespace: str, what: str) -> list[dict[str, Any]]:
    return [
        e
        for e in map(json.loads, await client.lrange(app_key(namespace, "events"), 0, -1))
        if e["what"] == what
    ]


@pytest.mark.slow
async def test_horae_workers_drain_stops_one_worker_process_which_exits_0(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    ports = {"a": _free_port(), "b": _free_port()}
    workers = WorkerProcesses(redis_url, namespace, tmp_path)
    env = workers.env({})
    client = aioredis.Redis.from_url(redis_url)
    procs = {
        n: workers.spawn(n, grace=30, env=FAST_BEAT, extra_args=("--health-port", str(p)))
        for n, p in ports.items()
    }
    try:
        for n, w in procs.items():
            await w.wait_ready()
            await _until(ports[n], "/readyz", 200, 30, f"{n} ready")
        async with producer(redis_url, namespace) as s:
            first = await s.schedule_in(
                BLOCK_TOPIC, 0, payload={"block": [1], "sleep": 10}
            )  # (outlasts three CLI calls on a busy machine)
            deadline = time.monotonic() + 15
            while not (started := await _events(client, namespace, "start")):
                assert time.monotonic() < deadline, "the attempt did not start"
                await asyncio.sleep(0.05)
            # The worker running it is drained (a); the other (b) takes what comes after.
            name = next(n for n, w in procs.items() if w.pid == started[0]["pid"])
            a, b, port = procs[name], procs["b" if name == "a" else "a"], ports[name]
            [a_id] = [w.id for w in await s.workers() if w.pid == a.pid]

            asked = time.monotonic()
            done = _horae(env, "workers", "drain", a_id)
            assert done.returncode == 0 and a_id in done.stdout, done.stderr
            took, body = await _until(port, "/readyz", 503, 5, "unready after the drain request")
            unready_after = time.monotonic() - asked  # (the CLI's own start-up included)
            print(f"/readyz 503 {unready_after:.2f} s after `horae workers drain` was started")
            assert unready_after < 3.5, "unready within about one heartbeat (1 s)"
            assert body["status"] == "unready" and "draining" in body["reason"], body
            later = await s.schedule_in(
                BLOCK_TOPIC, 0, payload={"n": 2}
            )  # a claims no more: b runs it

            shown = _horae(env, "workers", "list", "--json")
            assert shown.returncode == 0, shown.stderr
            states = {
                w["id"]: (w["state"], w["running"]) for w in json.loads(shown.stdout)["items"]
            }
            assert states[a_id] == ("draining", 1) and a.proc.poll() is None, states
            table = _horae(env, "workers", "list")
            assert [
                line for line in table.stdout.splitlines() if a_id in line and "draining" in line
            ], table.stdout

            code, _ = await a.wait_exit(20)
            assert code == 0, a.describe()
            finished = {e["job"]: e["pid"] for e in await _events(client, namespace, "finish")}
            assert finished.get(first) == a.pid, (
                "the running attempt completed on a, within its grace"
            )
            deadline = time.monotonic() + 15
            while later not in finished:
                assert time.monotonic() < deadline, (
                    "the job scheduled after the request did not run"
                )
                await asyncio.sleep(0.05)
                finished = {e["job"]: e["pid"] for e in await _events(client, namespace, "finish")}
            assert finished[later] == b.pid, "a claimed nothing after the request"
            assert [w.id for w in await s.workers()] != [] and a_id not in [
                w.id for w in await s.workers()
            ]
            assert (await s.get_job(first)).state is JobState.COMPLETED  # type: ignore[union-attr]
            assert "drain requested" in a.log()
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{workers.logs()}") from None
    finally:
        await client.aclose()
        workers.close()


def test_draining_an_unknown_worker_exits_1_with_one_line_naming_it(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    env = WorkerProcesses(redis_url, namespace, tmp_path).env({})
    done = _horae(env, "workers", "drain", "no-such-host:1:abc")
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert (
        len(lines) == 1 and lines[0].startswith("Error: ") and "'no-such-host:1:abc'" in lines[0]
    ), lines
