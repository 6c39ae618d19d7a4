"""A worker's housekeeping: the heartbeat that keeps its running attempts' leases,
and the periodic round that refreshes the job gauges, recovers attempts whose
worker died and prunes finished jobs and dead letters past retention."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from scheduler.core.clock import Clock
from scheduler.core.config import RetentionSettings, WorkerSettings
from scheduler.core.outbox import WORKER_LOST, ErrorRecord
from scheduler.observe.metrics import Metrics
from scheduler.store.redis import RedisStore
from scheduler.store.scripts import ScriptCode, SettleReply, settle_reply
from scheduler.store.topic_memory import UnservedWatch
from scheduler.worker.attempt import lost_settlement

log = logging.getLogger("horae.worker")

PRUNE_BATCH = 500  # store.prune's limit per set: a full batch means there may be more
UNSERVED_EVERY_S = 5.0  # how often the known topics are pruned and their waiting jobs counted


# After a failed attempt is written: (job id, topic, attempt, error, metadata, reply).
class OnFailure(Protocol):
    """What the worker does with a written failure (Worker._after_failure)."""

    def __call__(
        self,
        job_id: str,
        topic: str,
        attempt: int,
        error: ErrorRecord,
        metadata: Any,
        reply: SettleReply,
    ) -> None: ...


class Housekeeping:
    """The heartbeat and housekeeping loops of one worker, and the recovery and pruning they run."""

    def __init__(
        self,
        store: RedisStore,
        clock: Clock,
        settings: WorkerSettings,
        retention: RetentionSettings,
        metrics: Metrics,
        leases: Mapping[str, str],
        on_failure: OnFailure,
        advertise: Callable[[], Awaitable[None]],
    ) -> None:
        self.store, self.clock, self.settings, self.retention = store, clock, settings, retention
        self.metrics = metrics
        self._leases = leases  # the worker's running attempts: job id -> token
        self._on_failure = on_failure
        self._advertise = advertise  # the worker's registry entry (scheduler/worker/advertise.py)
        self.unserved = UnservedWatch(store, metrics, settings.topic_memory_ms)

    async def heartbeat_loop(self) -> None:
        """Advertise the worker and extend the leases of running attempts three times per
        lease (or per registry TTL, when shorter), until cancelled."""
        interval = min(self.settings.lease_ms, self.settings.registry_ttl_ms) / 3000
        while True:
            await asyncio.sleep(interval)
            try:
                await self._advertise()
            except Exception as exc:  # noqa: BLE001 - next beat tries again
                log.warning(
                    "advertising the worker failed: %s", exc, extra={"event": "heartbeat_error"}
                )
            leases = list(self._leases.items())
            if not leases:
                continue
            try:
                lost = await self.store.extend_leases(
                    leases, self.clock.now_ms(), self.settings.lease_ms
                )
            except Exception as exc:  # noqa: BLE001 - next beat tries again
                log.warning("heartbeat failed: %s", exc, extra={"event": "heartbeat_error"})
                continue
            if lost:
                log.warning("%d leases were lost to recovery", lost, extra={"event": "lease_lost"})

    async def loop(self, on_round: Callable[[], Awaitable[None]] | None = None) -> None:
        """Every recover_interval_s: gauges, `on_round`, recovery; the known topics (pruned past the
        topic memory, gauge and WARN of their waiting jobs) every UNSERVED_EVERY_S; prune every
        prune_interval_s."""
        last_prune, last_unserved = 0.0, float("-inf")
        while True:
            await asyncio.sleep(self.settings.recover_interval_s)
            try:
                self.metrics.jobs_by_state = await self.store.stats()
                if on_round is not None:
                    await on_round()
                await self.recover_expired()
                if time.monotonic() - last_unserved >= UNSERVED_EVERY_S:
                    last_unserved = time.monotonic()
                    await self.unserved.refresh(self.clock.now_ms())
                if time.monotonic() - last_prune >= self.retention.prune_interval_s:
                    last_prune = time.monotonic()
                    await self.prune()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - try again next round
                log.warning("housekeeping failed: %s", exc, extra={"event": "housekeeping_error"})

    async def recover_expired(self) -> int:
        """Fail attempts whose lease expired (their worker died) as WorkerLost; returns how many."""
        now = self.clock.now_ms()
        rows = [row for row in await self.store.expired_leases(now) if row.get("token")]
        if not rows:
            return 0
        items = [lost_settlement(row, now) for row in rows]
        codes = await self.store.fail(items, now)
        recovered = 0
        for row, item, code in zip(rows, items, codes):
            reply = settle_reply(code)
            if reply in (ScriptCode.LEASE_ALIVE, ScriptCode.LEASE_LOST):
                continue
            recovered += 1
            attempt = int(row["attempts"])
            self.metrics.attempts.add(1, {"topic": row["topic"], "outcome": WORKER_LOST})
            log.warning(
                "job %s: attempt %d lost its worker",
                row["id"],
                attempt,
                extra={"event": "worker_lost", "job_id": row["id"]},
            )
            assert item.error is not None
            self._on_failure(
                row["id"],
                row["topic"],
                attempt,
                error=item.error,
                metadata=json.loads(row.get("meta", "{}")),
                reply=reply,
            )
        return recovered

    async def prune(self) -> int:
        """Delete finished jobs past retention (loops while a batch comes back full), and forget
        the topics no worker served within [worker] topic_memory."""
        await self.store.forget_topics([], self.clock.now_ms(), self.settings.topic_memory_ms)
        total = 0
        r = self.retention
        while True:
            n = await self.store.prune(
                self.clock.now_ms(),
                r.completed_age_s * 1000,
                r.failed_age_s * 1000,
                r.cancelled_age_s * 1000,
                PRUNE_BATCH,
            )
            total += n
            if n < PRUNE_BATCH:
                return total + await self.prune_dead_letters()

    async def prune_dead_letters(self) -> int:
        """Drop dead letters past retention (age, then the per-topic cap; oldest first), counted
        per dead-letter topic in horae_dead_letters_dropped_total."""
        r, total = self.retention, 0
        for topic in await self.store.dead_letter_topics():
            while True:
                n = await self.store.prune_dead_letters(
                    topic,
                    self.clock.now_ms(),
                    r.dead_letter_age_s * 1000,
                    r.dead_letter_max,
                    PRUNE_BATCH,
                )
                if n:
                    self.metrics.dead_letters_dropped.add(n, {"topic": topic})
                total += n
                if n < PRUNE_BATCH:
                    break
        return total
