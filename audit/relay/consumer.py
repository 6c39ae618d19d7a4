"""The audit relay: outbox stream -> Postgres. Reads batches through the
`audit` consumer group, has the writer commit each in one transaction,
acknowledges only after commit, trims the outbox, and waits out Postgres
and Redis outages with the events kept in Redis."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time
from collections.abc import Callable, Sequence
from contextlib import suppress

import redis.asyncio as aioredis
from opentelemetry import metrics
from opentelemetry.metrics import Counter
from redis.exceptions import RedisError

from audit.options import RelayOptions, default_consumer_name
from audit.relay.depth import DepthSampler
from audit.relay.foldcache import FoldCache
from audit.relay.outage import is_outage
from audit.relay.stream import Entry, Lag, decode
from audit.relay.stream_partitioned import outbox_stream
from audit.relay.streamid import StreamId
from audit.relay.writer import BatchWriter

__all__ = ["AuditRelay", "serve"]

log = logging.getLogger("horae.audit")

# Consecutive refusals of a batch that are not an outage (a data error such as a NUL
# PostgreSQL cannot store) before the batch is written job by job to find the culprit.
ISOLATE_AFTER = 2


def _parked_counter() -> Counter:
    """horae_audit_events_parked_total, on the global meter provider (the process's)."""
    return metrics.get_meter("horae.audit").create_counter(
        "horae_audit_events_parked_total",
        description="Outbox events PostgreSQL refused for good, parked",
    )


class AuditRelay:
    """Moves outbox events into Postgres; run one in every worker process.

    Args:
        redis: the application's client (its connection pool is shared).
        namespace: whose outbox stream to read.
        database_url: the audit database (migrated on first write).
        options: tuning; see RelayOptions.from_settings.
        now_ms: the clock of the queue-depth samples (default: the wall clock); the
            scheduler's, so the samples fall in the minutes its events do.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        namespace: str,
        database_url: str,
        options: RelayOptions,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self.options = options
        self.consumer = self.options.consumer or default_consumer_name()
        self.stream = outbox_stream(redis, namespace, self.consumer, self.options.partitions)
        self.writer = BatchWriter(database_url, self.options, FoldCache(self.options.fold_cache))
        self.depth = DepthSampler(redis, namespace, self.options.partitions, self.writer, now_ms)
        self._held: list[Entry] | None = None  # read but not yet acknowledged
        self._held_written = False
        self._group_ready = False
        self._next_claim = 0.0  # time.monotonic() of the next look for a dead relay's entries
        self._next_trim = 0.0  # loop.time() of the next timed trim
        self._acked_since_trim = 0
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._stop_asked = asyncio.Event()  # ends a linger at once: stop() need not wait it out
        self._pg_down_since: float | None = None
        self._redis_down_since: float | None = None

    # ------------------------------------------------------------- building blocks
    async def read_batch(self, block_ms: int | None = None) -> list[Entry]:
        """Entries of a consumer whose process is gone (this host), or idle too long at a
        dead consumer (any host), first; else new ones (may block)."""
        if not self._group_ready:
            await self.stream.ensure_group()
            self._group_ready = True
        # Entries only become claimable after claim_idle_ms, so looking for them
        # a few times per claim_idle_ms is enough (not one more round trip per batch).
        now = time.monotonic()
        if now >= self._next_claim:
            claimed = await self.stream.claim_from_dead(self.options.batch_size)
            if claimed:
                return claimed
            claimed = await self.stream.claim(self.options.claim_idle_ms, self.options.batch_size)
            if claimed:
                return claimed
            self._next_claim = now + self.options.claim_idle_ms / 10_000
        return await self.stream.read(self.options.batch_size, block_ms)

    async def write_batch(self, entries: Sequence[Entry]) -> int:
        """Commit the events of these entries to Postgres (no ack); return how many were new."""
        return await self.writer.write([pair for pair in map(decode, entries) if pair is not None])

    async def ack(self, entries: Sequence[Entry]) -> None:
        """Acknowledge entries (only ever after their batch committed)."""
        await self.stream.ack([e.stream_id for e in entries])

    async def trim(self) -> StreamId | None:
        """Trim the outbox behind the slowest consumer group; return the MINID used."""
        return await self.stream.trim(self.options.trim_approximate)

    async def lag(self) -> tuple[int, float | None]:
        """(outbox events not yet committed to Postgres, age in seconds of the oldest)."""
        lag: Lag = await self.stream.lag(self.options.lag_scan_limit)
        return lag.pending, lag.oldest_age_s

    # ------------------------------------------------------------- lifecycle
    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Run the relay in a background task until stop()."""
        if self.running:
            return
        self._stopping = False
        self._stop_asked = asyncio.Event()  # bound to the loop the relay runs on
        self._task = asyncio.create_task(self._loop(), name=f"audit-relay:{self.consumer}")

    async def stop(self) -> None:
        """Drain what arrives within drain_timeout_s, then cancel; unfinished entries
        stay pending in Redis for another relay to claim."""
        task, self._stopping = self._task, True
        self._stop_asked.set()
        if task is not None:
            try:
                await asyncio.wait_for(
                    asyncio.shield(task),
                    self.options.drain_timeout_s + self.options.block_ms / 1000,
                )
            except TimeoutError:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
            self._task = None
            try:
                if self._held is None and await self.stream.pending_of_self() == 0:
                    await self.stream.delete_consumer()
            except RedisError as exc:
                log.debug("audit relay: could not remove consumer %s: %s", self.consumer, exc)
        await self.stream.aclose()
        await self.depth.aclose()
        await self.writer.close()

    async def step(self) -> int:
        """One turn of the relay's loop: read a batch (blocking up to block_ms unless
        stopping), commit it (retrying until Postgres takes it), acknowledge it, then
        linger after a partial batch and trim when due. Run by start(); call it
        directly only on a relay that is not started.

        Returns:
            How many entries were settled (0: none arrived).

        Raises:
            RedisError, OSError: when Redis fails; a batch already read stays held
                and is settled by the next call.
        """
        if self._held is None:
            self._held = await self.read_batch(None if self._stopping else self.options.block_ms)
            self._held_written = False
        if self._held:
            if not self._held_written:
                await self._write_until_committed(self._held)
                self._held_written = True
            await self.ack(self._held)
        settled, self._held = len(self._held or ()), None
        if self._pg_down_since is None and not self._stopping:
            # Between batches, never beside one (one connection, one operation at a time); not
            # while PostgreSQL is down (the batches' retries own the outage).
            await self.depth.maybe_sample()
        if 0 < settled < self.options.batch_size and not self._stopping and self.options.linger_ms:
            # Under a steady trickle, one transaction per few events would cost more in
            # round trips than the events themselves: let a batch gather (audit lags by ms).
            with suppress(TimeoutError):
                await asyncio.wait_for(self._stop_asked.wait(), self.options.linger_ms / 1000)
        self._acked_since_trim += settled
        # Acknowledged entries still take Redis memory until trimmed: trim on a timer, and
        # under load as soon as a batch's worth is acknowledged (the outbox stays small).
        loop = asyncio.get_running_loop()
        due = loop.time() >= self._next_trim
        if (
            due or self._acked_since_trim >= self.options.trim_after_entries
        ) and not self._stopping:
            await self.trim()
            self._acked_since_trim = 0
            if due:
                self._next_trim = loop.time() + self.options.trim_interval_s
                await self.stream.forget_dead_consumers(self.options.consumer_gc_idle_ms)
        return settled

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        redis_failures = 0
        while True:
            try:
                if not await self.step() and self._stopping:
                    return
                self._redis_up(loop.time())
                redis_failures = 0
            except (RedisError, OSError) as exc:
                self._redis_down(loop.time(), exc)
                await asyncio.sleep(self._backoff(redis_failures))
                redis_failures += 1
            except Exception:  # never let the relay die silently; events stay in Redis
                log.exception(
                    "audit relay: unexpected error; retrying", extra={"event": "audit.relay_error"}
                )
                await asyncio.sleep(self.options.retry_max_s)

    async def _write_until_committed(self, entries: Sequence[Entry]) -> None:
        loop = asyncio.get_running_loop()
        failures = refused = 0
        touched = loop.time()
        while True:
            try:
                if refused >= ISOLATE_AFTER:
                    await self._isolate(entries)
                else:
                    await self.write_batch(entries)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an outage is retried until it ends: events are never dropped
                refused = 0 if is_outage(exc) else refused + 1
                self._pg_down(loop.time(), exc, len(entries))
                await asyncio.sleep(self._backoff(failures))
                failures += 1
                if loop.time() - touched > self.options.claim_idle_ms / 3000:
                    touched = loop.time()
                    try:
                        await self.stream.touch([e.stream_id for e in entries])
                    except RedisError as redis_exc:
                        log.debug("audit relay: could not keep entries claimed: %s", redis_exc)
                continue
            self._pg_up(loop.time())
            return

    async def _isolate(self, entries: Sequence[Entry]) -> None:
        """Write a batch PostgreSQL refused (not an outage) job by job, each job's events
        together; a job refused twice more is parked (audit.stream.park), counted and
        logged once, so one poison event cannot stall the audit of a namespace.

        Raises:
            Exception: an outage meanwhile (the whole batch is retried; jobs already
                written are written again harmlessly).
        """
        jobs: dict[str, list[Entry]] = {}
        for entry in entries:
            pair = decode(entry)
            if pair is not None:  # (undecodable ones were logged by decode; they are acknowledged)
                jobs.setdefault(pair[1].job_id, []).append(entry)
        for job_id, group in jobs.items():
            error: Exception | None = None
            for _ in range(2):
                try:
                    await self.write_batch(group)
                    error = None
                    break
                except Exception as exc:
                    if is_outage(exc):
                        raise
                    error = exc
            if error is not None:
                await self.stream.park(group, f"{type(error).__name__}: {error}")
                _parked_counter().add(len(group))
                log.warning(
                    "audit relay: PostgreSQL refuses the events of job "
                    "%r (%s: %s); %d parked in %s, the relay goes on",
                    job_id,
                    type(error).__name__,
                    error,
                    len(group),
                    self.stream.parked_key,
                    extra={"event": "audit.events_parked", "job_id": job_id},
                )

    def _backoff(self, failures: int) -> float:
        return float(
            min(self.options.retry_max_s, self.options.retry_initial_s * 2 ** min(failures, 30))
        )

    def _pg_down(self, now: float, exc: BaseException, waiting: int) -> None:
        if self._pg_down_since is not None:
            log.debug("audit relay: Postgres still failing: %r", exc)
            return
        self._pg_down_since = now
        # One warning per outage, whatever the error; a traceback when it does not
        # look like an outage (a bug: it is retried too, events are never dropped).
        what = (
            "PostgreSQL unavailable" if is_outage(exc) else "writing a batch to PostgreSQL failed"
        )
        log.warning(
            "audit relay: %s (%s: %s); events wait in Redis, retrying with backoff up to %.1fs",
            what,
            type(exc).__name__,
            exc,
            self.options.retry_max_s,
            exc_info=None if is_outage(exc) else exc,
            extra={"event": "audit.postgres_down", "waiting": waiting},
        )

    def _pg_up(self, now: float) -> None:
        if self._pg_down_since is not None:
            log.info(
                "audit relay: PostgreSQL writes resumed after %.1fs; catching up",
                now - self._pg_down_since,
                extra={"event": "audit.postgres_up"},
            )
            self._pg_down_since = None

    def _redis_down(self, now: float, exc: BaseException) -> None:
        if self._redis_down_since is None:
            self._redis_down_since = now
            log.warning(
                "audit relay: Redis unavailable (%s: %s); retrying",
                type(exc).__name__,
                exc,
                extra={"event": "audit.redis_down"},
            )

    def _redis_up(self, now: float) -> None:
        if self._redis_down_since is not None:
            log.info(
                "audit relay: Redis back after %.1fs",
                now - self._redis_down_since,
                extra={"event": "audit.redis_up"},
            )
            self._redis_down_since = None


def settle_gc() -> None:
    """Tune the garbage collector of a process that only relays (`horae audit relay`, a
    worker's relay process), once it has started: what it imported is frozen out of the
    collector's passes, and young collections run every 10,000 allocations instead of 700
    (the relay allocates a few dicts and tuples per event and keeps almost none of them).
    bench/relay_instructions.py: 3 % fewer instructions per job."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


async def serve(
    relay: AuditRelay,
    started: Callable[[], None],
    alive: Callable[[], bool] = lambda: True,
    signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
    stopping: Callable[[signal.Signals], None] | None = None,
) -> None:
    """Run `relay` until one of `signals` (or until alive() says no: asked every second), then
    drain it (AuditRelay.stop): `horae audit relay` and a worker's relay process. `stopping` is
    told the signal first (its readiness turns 503 before the drain)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        if stopping is not None:
            stopping(sig)
        stop.set()

    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await relay.start()
        settle_gc()
        started()
        while not stop.is_set() and alive():
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    finally:
        await relay.stop()
        for sig in signals:
            with suppress(ValueError):
                loop.remove_signal_handler(sig)
