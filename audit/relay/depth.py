"""The queue-depth samples of the console's charts: at most once a minute, between batches, a
relay reads each topic's scheduled and retrying counts from Redis (the store's counts hash)
and writes them to the rollups in a transaction of its own (audit/relay/writer.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta

import redis.asyncio as aioredis

from audit.relay.outage import is_outage
from audit.relay.writer import BatchWriter
from audit.rollups import MINUTE_MS, DepthSample
from scheduler.core.errors import StorageError
from scheduler.core.timeutil import ms_to_utc
from scheduler.store.reads import ReadStore

__all__ = ["DepthSampler"]

log = logging.getLogger("horae.audit")

SAMPLE_EVERY_MS = MINUTE_MS
MINUTE_ROLLUPS_KEPT = timedelta(days=2)  # the hour rows keep the rest


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class DepthSampler:
    """Samples the queue depth of every topic of a namespace once a minute.

    Args:
        redis: the relay's client (a connection of the sampler's own is opened on first use).
        namespace: whose counts to read.
        partitions: the namespace's partition count.
        writer: the relay's writer (the sample is written by it, never beside a batch).
        now_ms: the clock (epoch ms); None: the wall clock.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        namespace: str,
        partitions: int,
        writer: BatchWriter,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self._redis, self._namespace, self._partitions = redis, namespace, partitions
        self._writer = writer
        self._now_ms = now_ms or _wall_ms
        self._store: ReadStore | None = None
        self._next_ms = 0
        self._failing = False

    async def maybe_sample(self) -> bool:
        """Sample when a minute has passed since the last try; never raises (a failure is
        logged once and the next minute tries again). Returns whether a sample was written."""
        now = self._now_ms()
        if now < self._next_ms:
            return False
        self._next_ms = now - now % SAMPLE_EVERY_MS + SAMPLE_EVERY_MS
        try:
            await self.sample(now)
        except Exception as exc:  # (the charts lose a point; the relay goes on)
            # An outage is the batches' to report (one warning per outage): debug here.
            quiet = is_outage(exc) or isinstance(exc, StorageError)
            if not self._failing and not quiet:
                log.warning(
                    "audit relay: no queue-depth sample (%s: %s); trying again in a minute",
                    type(exc).__name__,
                    exc,
                    extra={"event": "audit.depth_sample_failed"},
                )
            else:
                log.debug("audit relay: no queue-depth sample: %r", exc)
            self._failing = True
            return False
        self._failing = False
        return True

    async def sample(self, now_ms: int | None = None) -> list[DepthSample]:
        """Read the counts and write one sample per topic at this minute; return them.

        Raises:
            StorageError: Redis failed. PostgresUnavailable, asyncpg.PostgresError: as
                BatchWriter.record_depth.
        """
        now = self._now_ms() if now_ms is None else now_ms
        if self._store is None:
            self._store = ReadStore(self._redis, self._namespace, partitions=self._partitions)
        counts = await self._store.stats_by_topic()
        minute = ms_to_utc(now - now % MINUTE_MS)
        samples = [
            DepthSample(topic, minute, c.get("scheduled", 0), c.get("retrying", 0))
            for topic, c in counts.items()
        ]
        await self._writer.record_depth(samples, minute - MINUTE_ROLLUPS_KEPT)
        return samples

    async def aclose(self) -> None:
        """Close the sampler's Redis connection."""
        if self._store is not None:
            store, self._store = self._store, None
            await store.aclose()
