"""horae through its public facade: Scheduler(settings=..., listeners=registry),
schedule_in / schedule_at, make_worker(). `audit` is a flag of the adapter:
off = settings.audit.enabled False; on = enabled with a private PostgreSQL and
`await s.audit.flush()` inside the measured time, with the default settings: the worker's
relay in a child process (`[audit] relay_process = true`). `relay_process` (horae+audit-proc):
this process relays nothing (`[audit] relay = false`) and a `horae audit relay` process of its
own (horae_relay.py; pinned to `relay_core` when given) moves the outbox to PostgreSQL. The
flush waits for whichever relays."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from adapters.base import (
    QUEUE,
    RETRY_ATTEMPTS,
    RETRY_DELAY_S,
    TOPIC,
    Adapter,
    Job,
    NotAvailable,
    pkg_version,
)

BULK_CHUNK = 1_000  # as the bullmq adapter's addBulk chunks


def audit_wired() -> bool:
    """True once the facade has the audit trail (`Scheduler.audit`); it was being built alongside
    this bench."""
    from scheduler import Scheduler

    return hasattr(Scheduler, "audit")


class HoraeAdapter(Adapter):
    name = "horae"
    supports_bulk = True  # Scheduler.schedule_many
    supports_priority = (
        True  # priority= on schedule_at / schedule_in / schedule_many items (issue 14)
    )

    def __init__(self, redis_url: str, on_run: Any, options: dict[str, Any]) -> None:
        super().__init__(redis_url, on_run, options)
        from horae.settings import load_settings
        from listeners import ListenerRegistry
        from scheduler import Backoff, RetryPolicy, Scheduler

        self.audit = bool(options.get("audit"))
        settings = load_settings(
            env={},
            redis_url=redis_url,
            namespace=QUEUE,
            database_url=options.get("database_url") or None,
        )
        # horae+audit-proc: workers relay nothing, a `horae audit relay` the driver starts does.
        self.relay_process = self.audit and bool(options.get("relay_process"))
        # horae+audit: the default settings, whose relay runs in a child process of the worker's
        # ([audit] relay_process); its CPU is counted with the client's.
        self.child_relay = self.audit and not self.relay_process and settings.audit.relay_process
        audit: dict[str, Any] = {"enabled": self.audit}
        if self.relay_process:
            audit["relay"] = False
        settings = settings.model_copy(update={"audit": settings.audit.model_copy(update=audit)})
        self.registry = ListenerRegistry()
        on_run_ = on_run

        async def handler(event: Any) -> None:
            started = time.time()
            if on_run_(event.payload, started):
                raise RuntimeError("bench: fail the first run")

        self.registry.add(TOPIC, handler)
        if self.audit and not audit_wired():
            raise NotAvailable("n/a (audit not wired yet)")
        self.s = Scheduler(settings=settings, listeners=self.registry)
        self.retry_policy = RetryPolicy(RETRY_ATTEMPTS, Backoff("fixed", int(RETRY_DELAY_S * 1000)))
        self.worker: Any = None
        self.trail: Any = (
            None  # what finish() flushes: s.audit, or (relay_process) a trail of our own
        )
        self.relay: Any = None  # horae_relay.RelayProcess (relay_process, worker role)
        self._redis: Any = None

    def versions(self) -> dict[str, str]:
        return {
            "horae": pkg_version("horae"),
            "redis-py": pkg_version("redis"),
            "hiredis": pkg_version("hiredis"),
        }

    def settings(self) -> dict[str, Any]:
        st = self.s.settings
        return {
            "audit.enabled": st.audit.enabled,
            "audit.relay": self._relay_note(),
            "audit.relay_thread": st.audit.relay_thread,
            "audit.batch_size": st.audit.batch_size,
            "audit.block_ms": st.audit.block_ms,
            "redis_max_connections": getattr(st, "redis_max_connections", "?"),
            "worker.claim_batch": st.worker.claim_batch,
            "worker.local_handoff": (
                f"{st.worker.local_handoff} (a job scheduled for now by this process goes "
                "straight to its own worker when a slot is free and nothing else is due)"
            ),
            "worker.lease_ms": st.worker.lease_ms,
            "worker.recover_interval_s": st.worker.recover_interval_s,
            "retention.completed_count": st.retention.completed_count,
            "retry (default jobs)": (
                f"{st.retry.attempts} attempts, {st.retry.backoff} {st.retry.delay_ms} ms"
            ),
            "retry (retry scenario)": (
                f"{RETRY_ATTEMPTS} attempts, fixed {int(RETRY_DELAY_S * 1000)} ms"
            ),
            "enqueue": "schedule_in(topic, 0) / schedule_at(topic, aware UTC datetime)",
            "bulk": (
                f"schedule_many in chunks of {BULK_CHUNK} (items: "
                f"topic, payload, run_at when delayed, retry)"
            ),
            "priority (drain_priority)": (
                "priority= on each schedule_many item (-1/0/1, higher first)"
            ),
            "rate limit (rate_limited)": (
                "configure_topic(topic, TopicOptions(rate_limit=RateLimit(max, per)))"
            ),
        }

    def _relay_note(self) -> Any:
        st = self.s.settings.audit
        if not self.audit:
            return st.relay
        if self.child_relay:
            return (
                f"{st.relay}, relay_process = true (the default: the "
                f"worker's relay in a child process of its own, "
                "started before the clock, inheriting the client core; its CPU counted; await "
                "s.audit.flush(timeout=300) inside the measured time)"
            )
        if self.relay_process:
            core = self.options.get("relay_core")
            where = "on the client core" if core is None else f"pinned to core {core}"
            return (
                f"{st.relay} (a `horae audit relay` process of its own, same "
                f"Redis, PostgreSQL and namespace, {where}, started before the "
                f"clock, its CPU counted; await flush(timeout=300) inside the "
                "measured time)"
            )
        return (
            f"{st.relay} (the relay started in this process before the clock"
            f"{', on a thread of its own' if st.relay_thread else ', on its loop'}; "
            "await s.audit.flush(timeout=300) inside the measured time)"
        )

    async def connect(self) -> None:
        await self.s.connect()
        if not self.audit:
            return
        if not self.relay_process:
            self.trail = self.s.audit
            if self.options.get("role") != "producer":
                await (
                    self.s.start_relay()
                )  # what Scheduler.worker() does: every worker process relays
            # e2e_split's producer is a web process's Scheduler: no worker, no relay.
            return
        if self.options.get("role") == "producer":
            return  # relays nothing, flushes nothing: only writes outbox events
        import redis.asyncio as aioredis
        from adapters.horae_relay import RelayProcess

        from audit import AuditTrail, RelayOptions

        url = self.options["database_url"]
        self._redis = aioredis.Redis.from_url(self.redis_url)
        self.trail = AuditTrail(
            self._redis, QUEUE, url, RelayOptions.from_settings(self.s.settings.audit)
        )
        await (
            self.trail.open()
        )  # migrates before the clock, as Scheduler.connect does with the relay in-process
        await self.trail.close()  # flush() needs only Redis
        self.relay = RelayProcess(self.redis_url, url, QUEUE, self.options.get("relay_core"))
        await self.relay.start(self._redis)

    def processes(self) -> list[int]:
        if self.child_relay:
            import psutil

            return [
                c.pid for c in psutil.Process().children() if "audit.relay.child" in c.cmdline()
            ]
        return [self.relay.pid] if self.relay is not None and self.relay.pid else []

    async def enqueue(self, job: Job) -> None:
        retry = self.retry_policy if job.retry else None
        # priority= only when a scenario sets one: the other scenarios make the same call as before
        # it existed
        extra = {} if job.priority is None else {"priority": job.priority}
        if job.due is None:
            await self.s.schedule_in(TOPIC, 0, payload=job.payload, retry=retry, **extra)
        else:
            when = datetime.fromtimestamp(job.due, tz=UTC)
            await self.s.schedule_at(TOPIC, when, payload=job.payload, retry=retry, **extra)

    async def enqueue_bulk(self, jobs: Sequence[Job]) -> None:
        for start in range(0, len(jobs), BULK_CHUNK):
            await self.s.schedule_many(
                [self._item(job) for job in jobs[start : start + BULK_CHUNK]]
            )

    def _item(self, job: Job) -> dict[str, Any]:
        item: dict[str, Any] = {"topic": TOPIC, "payload": job.payload}
        if job.due is not None:
            item["run_at"] = datetime.fromtimestamp(job.due, tz=UTC)
        if job.retry:
            item["retry"] = self.retry_policy
        if job.priority is not None:
            item["priority"] = job.priority
        return item

    async def set_rate_limit(self, max_jobs: int, per_s: float) -> None:
        from scheduler import RateLimit, TopicOptions

        await self.s.configure_topic(
            TOPIC, TopicOptions(rate_limit=RateLimit(max=max_jobs, per=f"{per_s:g}s"))
        )

    async def start_worker(self, concurrency: int) -> None:
        self.worker = self.s.make_worker(concurrency=concurrency)
        await self.worker.start()

    async def stop_worker(self) -> None:
        if self.worker is not None:
            await self.worker.stop(grace=5)
            self.worker = None

    async def claim_batches(self, batch: int, concurrency: int = 1) -> tuple[int, int]:
        """The claim path alone (RedisStore.claim = claim.lua) until nothing is due, with
        `concurrency` callers at once: (script calls, jobs)."""
        store, clock, lease = self.s.store, self.s.clock, self.s.settings.worker.lease_ms
        calls = claimed = 0

        async def caller(worker: str) -> None:
            nonlocal calls, claimed
            while True:
                jobs = (await store.claim(clock.now_ms(), batch, lease, worker))[0]
                calls += 1
                claimed += len(jobs)
                if len(jobs) < batch:
                    return

        await asyncio.gather(*(caller(f"bench-claim-{i}") for i in range(concurrency)))
        return calls, claimed

    async def settle(self) -> None:
        if self.trail is not None:
            await self.trail.flush(timeout=300)

    async def finish(self) -> None:
        if self.trail is not None:
            await self.trail.flush(timeout=300)  # the audit is complete when the clock stops

    async def close(self) -> None:
        try:
            await self.s.close()
        finally:
            if self.relay is not None:
                await self.relay.stop()
            if self._redis is not None:
                await self._redis.aclose()
