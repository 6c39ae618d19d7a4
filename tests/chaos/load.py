"""The chaos run's producer: schedules the run's jobs at an even rate through the Redis
proxy, each with an id of its own so a call whose reply was lost is simply sent again
(enqueue answers "duplicate_id" the second time and creates nothing), cancels some
while they wait or run, and keeps five cron schedules ticking every second. Every
acknowledgement and every cancel is written down (JobRecord) for the checker."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from scheduler.core.errors import StorageError
from tests.chaos.app import CRON, DOOMED, FAIL_ONCE, OK, SLOW, SOLO_TOPIC, real_ms
from tests.chaos.checker import JobRecord

T = TypeVar("T")
CRONS = 5
RETRY = {"attempts": 5, "backoff": {"type": "fixed", "delay": 1000}}
# kind: (weight, topic, delay range s, payload, retry, cancel after s or None)
KINDS: dict[
    str, tuple[int, str, tuple[float, float], dict[str, Any], dict[str, Any], float | None]
] = {
    "ok": (50, OK, (0, 0), {}, RETRY, None),
    "ok_delayed": (15, OK, (1, 8), {}, RETRY, None),
    "fail_once": (
        10,
        FAIL_ONCE,
        (0, 0),
        {},
        {"attempts": 3, "backoff": {"type": "fixed", "delay": 1000}},
        None,
    ),
    "doomed": (
        5,
        DOOMED,
        (0, 0),
        {},
        {"attempts": 2, "backoff": {"type": "fixed", "delay": 1000}},
        None,
    ),
    "slow": (4, SLOW, (0, 0), {"sleep": 4.5}, RETRY, None),  # longer than the 3 s lease
    "cancel_waiting": (8, OK, (20, 30), {}, RETRY, 1.0),
    "cancel_running": (8, SLOW, (0, 0), {"sleep": 3.0}, RETRY, 1.0),
    "solo": (
        6,
        SOLO_TOPIC,
        (0, 2),
        {"sleep": 0.5},
        RETRY,
        None,
    ),  # its only worker restarts now and then
}
COALESCED = (
    "coal"  # a schedule every second with misfire="coalesce" (checker: one run per gap, never none)
)


async def persist(call: Callable[[], Awaitable[T]], stop_at: float = float("inf")) -> T:
    """`call` until Redis answers: safe only for calls that are idempotent (ids, cancels)."""
    delay = 0.05
    while True:
        try:
            return await call()
        except StorageError:
            if time.monotonic() > stop_at:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


class Producer:
    """Schedules `jobs` jobs over `seconds` on a connected Scheduler `s`."""

    def __init__(self, s: Any, jobs: int, seconds: float, seed: int) -> None:
        self.s, self.jobs, self.seconds = s, jobs, seconds
        self.rng = random.Random(seed ^ 0x5EED)
        self.records: dict[str, JobRecord] = {}
        self.crons: dict[str, tuple[int, int]] = {}  # misfire="all": every tick
        self.coalesced: dict[str, tuple[int, int]] = {}  # misfire="coalesce"
        self.errors: list[str] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def start_crons(self) -> None:
        for i in range(CRONS):
            name = f"tick{i}"
            await persist(
                lambda: self.s.schedule_cron(name, "* * * * * *", topic=CRON, misfire="all")
            )
            self.crons[name] = (real_ms(), 0)
        await persist(
            lambda: self.s.schedule_cron(COALESCED, "* * * * * *", topic=CRON, misfire="coalesce")
        )
        self.coalesced[COALESCED] = (real_ms(), 0)

    async def crons_fired(self, timeout_s: float) -> float | None:
        """Wait until every schedule has fired the ticks due so far (its next run is in the
        future); returns how long that took, None when it did not within `timeout_s`.

        The run pauses the schedules when its faults end. On a loaded machine a restarted worker
        takes seconds to start, so every worker may be down then: the ticks due meanwhile wait
        for the next worker (misfire="all"), and a pause before it came would drop them."""
        started = time.monotonic()
        names = {*self.crons, *self.coalesced}
        while time.monotonic() - started < timeout_s:
            infos = [c for c in await persist(self.s.list_crons) if c.name in names]
            now = real_ms()
            if len(infos) == len(names) and all(
                i.next_run_at and i.next_run_at.timestamp() * 1000 > now for i in infos
            ):
                return time.monotonic() - started
            await asyncio.sleep(0.1)
        return None

    async def pause_crons(self) -> None:
        for table in (self.crons, self.coalesced):
            for name, (created, _) in table.items():
                await persist(lambda: self.s.pause_cron(name))
                table[name] = (created, real_ms())

    async def run(self) -> None:
        """Schedule every job, spread evenly over the run; returns when all are acknowledged."""
        kinds = list(KINDS)
        weights = [KINDS[k][0] for k in kinds]
        start = time.monotonic()
        for n in range(self.jobs):
            at = start + self.seconds * n / self.jobs
            if (wait := at - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            kind = self.rng.choices(kinds, weights)[0]
            task = asyncio.create_task(self._one(f"c{n:06d}", kind))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        await asyncio.gather(*list(self._tasks))

    async def _one(self, job_id: str, kind: str) -> None:
        _, topic, (lo, hi), payload, retry, cancel_after = KINDS[kind]
        delay = self.rng.uniform(lo, hi)
        run_at = real_ms() + int(delay * 1000)
        rec = self.records[job_id] = JobRecord(kind, topic, run_at)
        try:
            await persist(
                lambda: self.s.schedule_in(
                    topic, delay, payload=payload, retry=retry, job_id=job_id
                )
            )
            rec.acked_ms = real_ms()
            if cancel_after is not None:
                await asyncio.sleep(cancel_after)
                if await persist(lambda: self.s.cancel(job_id)):
                    rec.cancel_ms = real_ms()
        except Exception as exc:  # noqa: BLE001 - reported with the run, never swallowed
            self.errors.append(f"{job_id} ({kind}): {type(exc).__name__}: {exc}")
