"""StoreBase: the Redis connection every store module shares (one pipelined wire),
its script and command calls with driver errors converted to StorageError, and the
wake-up subscription."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from scheduler.core.errors import StorageError
from scheduler.core.keys import Keys
from scheduler.store.cluster import ClusterWire, make_wire
from scheduler.store.scripts import Scripts
from scheduler.store.wire import Subscription, WireConnection


class StoreBase:
    """The connection, keys and scripts of one namespace; RedisStore's other parts build on it."""

    def __init__(
        self,
        redis: aioredis.Redis,
        namespace: str,
        audit: bool = True,
        wire: WireConnection | ClusterWire | None = None,
        replicas: int = 0,
        replica_timeout_ms: int = 1000,
        partition: int | None = None,
    ) -> None:
        self.redis = redis  # the owner's client: the wire connects where its URL says
        self.keys = Keys(
            namespace, partition
        )  # partition: one of a partitioned namespace's (store_partitioned.py)
        self._scripts = Scripts(audit)
        # Script calls and reads share one pipelined connection (none of them blocks).
        # Replies come back as str (hiredis decodes them): keys, fields and values are text.
        # On a Redis Cluster (a RedisCluster client) the wire routes each command to its slot's
        # node. replicas > 0 (durability="replicated"): each script call waits for that many
        # replicas.
        self.wire = (
            wire if wire is not None else make_wire(redis, True, replicas, replica_timeout_ms)
        )

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
        says which keys and channels the Redis user must be allowed (README: Security)."""
        text = str(exc)
        if text.startswith("NOPERM"):
            ns = self.keys.namespace
            return StorageError(
                f"redis {what} refused by the server's ACL for namespace {ns!r} "
                f"({text}): the Redis user needs keys ~{self.keys.prefix}* and "
                f"channels &{self.keys.prefix}* and the commands "
                "of the README's Security section"
            )
        return StorageError(f"redis {what} failed: {text}")

    async def aclose(self) -> None:
        """Close the script connection (the redis-py client is its owner's to close)."""
        await self.wire.aclose()

    async def subscribe_wake(self, on_wake: Callable[[], None]) -> Subscription:
        """Call `on_wake()` on every wake-up message, and after a lost subscription is back."""
        sub = Subscription(
            self.wire.pubsub_endpoint, [self.keys.wake], lambda channel, data: on_wake()
        )
        try:
            await sub.start()
        except RedisError as exc:
            raise self.storage_error(f"SUBSCRIBE {self.keys.wake}", exc) from exc
        return sub
