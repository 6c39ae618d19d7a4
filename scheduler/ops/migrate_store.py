"""The Redis side of a partition migration (scheduler/ops/migration.py): the namespace's meta record
and lock, scans of a partition's keys, the reads the preconditions need, and the two scripts that
move a job or schedule (copy_entry.lua on the target, then drop_entry.lua on the source)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError, ResponseError

from scheduler.core.errors import StorageError
from scheduler.core.keys import Keys
from scheduler.ops.migration_plan import glob_escape
from scheduler.store.cluster import make_wire
from scheduler.store.partitions import MIGRATION_FIELDS
from scheduler.store.pipe import as_map
from scheduler.store.scripts import Scripts

Ops = Sequence[tuple[str, Sequence[str]]]


class MigrationStore:
    """One namespace's keys across both layouts, reached over one pipelined wire (and the redis-py
    client for SCAN, which has no key to route by)."""

    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self.redis, self.namespace = redis, namespace
        self.wire = make_wire(redis, True)
        self.meta_key = Keys(namespace).meta
        self.lock_key = Keys(namespace).migrate_lock
        self._scripts = Scripts(
            audit=True
        )  # (copy and drop write no event: the flag changes nothing)

    async def call(self, *command: Any) -> Any:
        try:
            return await self.wire.call(*command)
        except RedisError as exc:
            raise StorageError(
                f"redis {command[0]} {command[1] if len(command) > 1 else ''} failed: {exc}"
            ) from exc

    async def many(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        try:
            return await self.wire.call_many(commands)
        except RedisError as exc:
            raise StorageError(f"redis read of {len(commands)} keys failed: {exc}") from exc

    # ------------------------------------------------------------------ meta and lock
    async def meta(self) -> dict[str, str]:
        return as_map(await self.call("HGETALL", self.meta_key))

    async def begin(self, old: int, new: int, started: str, by: str) -> None:
        """Record the migration (every connecting process is refused meanwhile: connection.py)."""
        await self.call(
            "HSET",
            self.meta_key,
            "partitions",
            old,
            *[x for pair in zip(MIGRATION_FIELDS, (old, new, started, by)) for x in pair],
        )

    async def finish(self, new: int) -> None:
        await self.call("HSET", self.meta_key, "partitions", new)
        await self.call("HDEL", self.meta_key, *MIGRATION_FIELDS, "migration_moved")

    async def count_moved(self, n: int) -> None:
        await self.call("HINCRBY", self.meta_key, "migration_moved", n)

    async def lock(
        self, by: str, ttl_ms: int, dead: Callable[[str], bool]
    ) -> tuple[str, int] | None:
        """Take (or, ours, keep) the migration lock, also from a holder `dead` says is gone; None
        when taken, else the holder and its ms left."""
        if await self.call("SET", self.lock_key, by, "NX", "PX", ttl_ms) is not None:
            return None
        holder = await self.call("GET", self.lock_key)
        if holder == by or (holder is not None and dead(holder)):
            await self.call("SET", self.lock_key, by, "PX", ttl_ms)
            return None
        if holder is None:
            return await self.lock(by, ttl_ms, dead)
        return holder, int(await self.call("PTTL", self.lock_key))

    async def unlock(self, by: str) -> None:
        if await self.call("GET", self.lock_key) == by:
            await self.call("DEL", self.lock_key)

    # ------------------------------------------------------------------ scans and reads
    async def scan(self, tag: Keys) -> list[str]:
        """The names of every key of `tag`, after its prefix (on a cluster, on the tag's node
        only)."""
        kwargs: dict[str, Any] = {}
        if isinstance(self.redis, RedisCluster):
            kwargs["target_nodes"] = self.redis.get_node_from_key(tag.due)
        out: list[str] = []
        try:
            async for key in self.redis.scan_iter(
                match=glob_escape(tag.prefix) + "*", count=1000, **kwargs
            ):
                text = (
                    key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else str(key)
                )
                out.append(text[len(tag.prefix) :])
        except RedisError as exc:
            raise StorageError(f"redis SCAN of {tag.prefix}* failed: {exc}") from exc
        return out

    async def hashes(self, keys: Sequence[str]) -> list[dict[str, str]]:
        return [as_map(flat) for flat in await self.many([("HGETALL", k) for k in keys])]

    async def unrelayed(self, tag: Keys, group: str) -> int:
        """Outbox entries of `tag` the audit consumer group `group` has not committed: its pending
        ones and those after its last-delivered id; every entry when no such group exists."""
        try:
            groups = [as_map(g) for g in await self.wire.call("XINFO", "GROUPS", tag.outbox)]
        except ResponseError as exc:
            if "no such key" in str(exc).lower():
                return 0
            raise StorageError(f"redis XINFO GROUPS {tag.outbox} failed: {exc}") from exc
        except RedisError as exc:
            raise StorageError(f"redis XINFO GROUPS {tag.outbox} failed: {exc}") from exc
        mine = next((g for g in groups if g.get("name") == group), None)
        if mine is None:
            return int(await self.call("XLEN", tag.outbox))
        after = await self.call(
            "XRANGE", tag.outbox, "(" + str(mine["last-delivered-id"]), "+", "COUNT", 100_000
        )
        return int(mine["pending"]) + len(after)

    # ------------------------------------------------------------------ moves
    async def _script(self, name: str, keys: Sequence[str], doc: dict[str, Any]) -> int:
        script = self._scripts[name]
        try:
            return int(await self.wire.evalsha(script.sha, script.source, keys, [json.dumps(doc)]))
        except RedisError as exc:
            raise StorageError(f"script {name} on {keys[0]} failed: {exc}") from exc

    async def copy(
        self,
        entry: str,
        counts: str,
        payload: str,
        logs: str,
        fields: dict[str, str],
        ops: Ops,
        count: str | None = None,
        big_payload: str | None = None,
        lines: Sequence[str] = (),
    ) -> int:
        """copy_entry.lua: a CopyCode, or ScriptCode.CONFLICT."""
        doc: dict[str, Any] = {
            "fields": [x for kv in fields.items() for x in kv],
            "ops": [list(o) for _, o in ops],
        }
        if count is not None:
            doc["count"] = count
        if big_payload is not None:
            doc["payload"] = big_payload
        if lines:
            doc["logs"] = list(lines)
        return await self._script(
            "copy_entry", [entry, counts, payload, logs, *(k for k, _ in ops)], doc
        )

    async def drop(
        self, entry: str, counts: str, payload: str, logs: str, ops: Ops, count: str | None = None
    ) -> int:
        """drop_entry.lua: a DropCode."""
        doc: dict[str, Any] = {"ops": [list(o) for _, o in ops]}
        if count is not None:
            doc["count"] = count
        return await self._script(
            "drop_entry", [entry, counts, payload, logs, *(k for k, _ in ops)], doc
        )

    async def delete(self, keys: Sequence[str]) -> None:
        """Delete keys one command each (each its own slot on a cluster; they share one tag)."""
        if keys:
            await self.many([("DEL", k) for k in keys])

    async def aclose(self) -> None:
        await self.wire.aclose()
