"""StoreBase: the Redis connection every store module shares (one pipelined wire), its script
and command calls with driver errors converted to StorageError, the wake-up subscription, and
the namespace's partitions (docs/how-to/scaling-out.md): where a new job goes, which partition
holds a job or a schedule, reads of every partition at once, and the stored layout."""

from __future__ import annotations

import asyncio
import copy
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Self, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import (
    AuthenticationError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from scheduler.core.errors import ServerUnavailable, StorageError
from scheduler.core.job import NewJob
from scheduler.core.keys import Keys
from scheduler.store.cluster import ClusterWire, make_wire
from scheduler.store.partitions import (
    LEGACY_KEYS,
    MIGRATION_FIELDS,
    job_routing,
    layout_error,
    migration_error,
    partition_of,
)
from scheduler.store.scripts import Scripts
from scheduler.store.wire import Subscription, WireConnection

T = TypeVar("T")

# How long a topic's home partition, as enqueue.lua last said it, is trusted (a hint only: the
# script enforces the home, so a topic limit set or removed since costs one refused call).
HOME_HINT_S = 10.0
# Error replies of a server that is up but cannot serve yet: loading its dataset, a replica cut
# from its master, a cluster without its quorum or in the middle of a resharding.
NOT_READY_REPLIES = ("LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN")


def server_unavailable(exc: BaseException) -> bool:
    """Whether a failed Redis call may succeed when tried again unchanged: no connection, a
    lost one, a timeout, or a server not ready yet; never a refused login, certificate or
    command."""
    refused_tls = (exc, exc.__cause__)
    if isinstance(exc, AuthenticationError) or any(
        isinstance(e, ssl.SSLCertVerificationError) for e in refused_tls
    ):
        return False
    if "CERTIFICATE_VERIFY_FAILED" in str(exc):  # (redis-py's wording of a refused certificate)
        return False
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | OSError | TimeoutError):
        return True
    return isinstance(exc, ResponseError) and str(exc).startswith(NOT_READY_REPLIES)


class StoreBase:
    """The connection, scripts and key sets of one namespace; RedisStore's other parts build on it.

    An unpartitioned namespace is one partition (its `{ns}` keys); a partitioned one has one key
    set `{ns|p}` per partition, and every script still touches one partition (one Cluster slot),
    so each transition stays atomic. Each method is written once for any count: a call on a job
    finds its partition (with one partition: no round trip), a new job or schedule is placed, a
    read reads every partition at once and merges (with one: just that one). `partition(p)` is the
    store over partition p alone, sharing the wire: a worker's loop claims, settles, heartbeats
    and fires schedules on it (`single`)."""

    def __init__(
        self,
        redis: aioredis.Redis,
        namespace: str,
        audit: bool = True,
        wire: WireConnection | ClusterWire | None = None,
        replicas: int = 0,
        replica_timeout_ms: int = 1000,
        partitions: int = 1,
    ) -> None:
        self.redis = redis  # the owner's client: the wire connects where its URL says
        # The namespace's own keys: all of them when unpartitioned; of a partitioned namespace
        # its meta (the layout) only. On a store of one partition (partition(p)): that one's.
        self.keys = Keys(namespace)
        # The key sets this store spans, indexed by partition number.
        self.parts: tuple[Keys, ...] = (
            (self.keys,)
            if partitions == 1
            else tuple(Keys(namespace, p) for p in range(partitions))
        )
        self.count = len(self.parts)
        # topic -> (home partition, until monotonic s): where enqueue.lua last sent a pinned
        # topic's job (topics.py: put_topic).
        self._homes: dict[str, tuple[int, float]] = {}
        self._scripts = Scripts(audit)
        # Script calls and reads share one pipelined connection (none of them blocks).
        # Replies come back as str (hiredis decodes them): keys, fields and values are text.
        # On a Redis Cluster (a RedisCluster client) the wire routes each command to its slot's
        # node.
        # replicas > 0 (durability="replicated"): each script call waits for that many replicas.
        self.wire = (
            wire if wire is not None else make_wire(redis, True, replicas, replica_timeout_ms)
        )

    def partition(self, p: int) -> Self:
        """The store over partition `p` alone (sharing this one's wire and scripts): what a
        worker's loop of that partition uses; a new job stored through it stays on `p`."""
        view = copy.copy(self)
        view.keys = self.parts[p]
        view.parts, view.count, view._homes = (view.keys,), 1, {}
        return view

    @property
    def single(self) -> Keys:
        """The key set of a store over one partition: claims, settlements, leases, heartbeats,
        reports and cron firing act on one partition only.

        Raises:
            TypeError: the store spans several partitions (use partition(p)).
        """
        if self.count != 1:
            raise TypeError(
                f"namespace {self.keys.namespace!r} has {self.count} partitions: this call acts "
                "on one, use store.partition(p)"
            )
        return self.keys

    async def _run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        script = self._scripts[name]
        try:
            return await self.wire.evalsha(script.sha, script.source, keys, args)
        except RedisError as exc:
            raise self.storage_error(f"script {name}", exc) from exc

    async def _call(self, what: str, *command: Any) -> Any:
        try:
            return await self.wire.call(*command)
        except RedisError as exc:
            raise self.storage_error(what, exc) from exc

    def storage_error(self, what: str, exc: RedisError | OSError) -> StorageError:
        """The StorageError for a failed Redis call; a refusal by the server's ACL (NOPERM)
        says which keys and channels the Redis user must be allowed (docs/how-to/security.md)."""
        text = str(exc)
        if text.startswith("NOPERM"):
            ns, prefix = self.keys.namespace, self.parts[0].prefix
            return StorageError(
                f"redis {what} refused by the server's ACL for namespace {ns!r} ({text}): the "
                f"Redis user needs keys ~{prefix}* and channels &{prefix}* and the commands "
                "of docs/how-to/security.md"
            )
        if server_unavailable(exc):
            return ServerUnavailable(f"redis {what} failed: {text}")
        return StorageError(f"redis {what} failed: {text}")

    async def aclose(self) -> None:
        """Close the script connection (the redis-py client is its owner's to close)."""
        await self.wire.aclose()

    async def subscribe_wake(self, on_wake: Callable[[], None]) -> Subscription:
        """Call `on_wake()` on every wake-up message, and after a lost subscription is back."""
        wake = self.single.wake
        sub = Subscription(self.wire.pubsub_endpoint, [wake], lambda channel, data: on_wake())
        try:
            await sub.start()
        except RedisError as exc:
            raise self.storage_error(f"SUBSCRIBE {wake}", exc) from exc
        return sub

    # ------------------------------------------------------------------ partitions
    async def _each(self, read: Callable[[Keys], Awaitable[T]]) -> list[T]:
        """`read` of every partition, all at once, in partition order (one: just that one)."""
        if self.count == 1:
            return [await read(self.keys)]
        return list(await asyncio.gather(*(read(k) for k in self.parts)))

    def partition_for(self, job: NewJob) -> int:
        """The partition a new job goes to: its topic's home when the topic has a topic-wide
        limit (as last learnt), else by its key, else dedupe key, else id."""
        if self.count == 1:
            return 0
        home = self._homes.get(job.topic)
        if home is not None and home[1] > time.monotonic():
            return home[0]
        return partition_of(job_routing(job.id, job.key, job.dedupe_key), self.count)

    def learn_home(self, topic: str, home: int) -> None:
        """enqueue.lua refused a job of `topic` elsewhere: its jobs go to `home` for a while."""
        self._homes[topic] = (home, time.monotonic() + HOME_HINT_S)

    def _home_of(self, reply_home: int | None) -> int | None:
        """The partition enqueue.lua named as the job's topic's home, when this store spans it
        (a store of one partition sends nothing elsewhere)."""
        if reply_home is None or not 0 <= reply_home < self.count:
            return None
        return reply_home if self.parts[reply_home].partition == reply_home else None

    async def _job_keys(self, job_id: str) -> Keys | None:
        """The key set holding a job: the only one (no round trip), else its id's partition
        first (jobs without key or dedupe key), then every other one at once; None when no
        partition has it."""
        if self.count == 1:
            return self.keys
        home = partition_of(job_id, self.count)
        others = [k for p, k in enumerate(self.parts) if p != home]
        try:
            if int(await self.wire.call("EXISTS", self.parts[home].job(job_id))):
                return self.parts[home]
            found = await self.wire.call_many([("EXISTS", k.job(job_id)) for k in others])
        except RedisError as exc:
            raise self.storage_error(f"read of job {job_id}", exc) from exc
        return next((k for k, f in zip(others, found) if int(f)), None)

    async def _cron_keys(self, name: str) -> Keys | None:
        """The key set holding a schedule: the only one (no round trip), else its name's
        partition or (a schedule of a pinned topic, see upsert_cron) the one that has it; None
        when no partition has it."""
        if self.count == 1:
            return self.keys
        own = self.parts[partition_of(name, self.count)]
        try:
            if int(await self.wire.call("EXISTS", own.cron(name))):
                return own
            found = await self.wire.call_many([("EXISTS", k.cron(name)) for k in self.parts])
        except RedisError as exc:
            raise self.storage_error(f"read of schedule {name}", exc) from exc
        return next((k for k, f in zip(self.parts, found) if int(f)), None)

    def _name_keys(self, name: str) -> Keys:
        """The key set a new schedule goes to by its name."""
        return self.parts[partition_of(name, self.count)]

    async def check_layout(self) -> None:
        """Check the partition count against the namespace's stored layout: refuse a namespace
        being migrated and a count other than the stored one. A partitioned store records its
        count on first use, and refuses a namespace that holds data in the unpartitioned layout;
        an unpartitioned one whose layout cannot be read (an ACL, TLS refused, a blip) goes on:
        its first call meets the same error and says it as it always did."""
        k, ns = self.keys, self.keys.namespace
        try:
            stored, *migration = await self.wire.call(
                "HMGET", k.meta, "partitions", *MIGRATION_FIELDS
            )
        except Exception as exc:  # noqa: BLE001
            if self.count == 1:
                return
            if isinstance(exc, RedisError):
                raise self.storage_error("read of the namespace layout", exc) from exc
            raise
        if migration[1] is not None:
            raise migration_error(ns, migration)
        if stored is None and self.count > 1:
            try:
                legacy = await self.wire.call_many([("EXISTS", k.prefix + n) for n in LEGACY_KEYS])
                if any(int(x) for x in legacy):
                    raise layout_error(ns, 1, self.count)
                await self.wire.call("HSETNX", k.meta, "partitions", self.count)
                stored = await self.wire.call("HGET", k.meta, "partitions")
            except RedisError as exc:
                raise self.storage_error("read of the namespace layout", exc) from exc
        if stored is not None and int(stored) != self.count:
            raise layout_error(ns, int(stored), self.count)
