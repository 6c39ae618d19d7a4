"""The outbox stream as the `audit` consumer group sees it: read, claim from
dead consumers, acknowledge, trim behind the slowest group, measure lag and
wait for a commit point. Only Redis 6.2 commands are used."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from audit.relay.streamid import GroupPosition, StreamId, format_id, parse_id, trim_point
from scheduler.core.keys import Keys
from scheduler.core.outbox import OutboxEvent, decode_entry
from scheduler.core.procutil import pid_alive
from scheduler.store.cluster import Wire, make_wire
from scheduler.store.pipe import as_map

log = logging.getLogger("horae.audit")

GROUP = "audit"
_MAX_TS_MS = 253_402_300_799_999  # 9999-12-31: beyond it no datetime (and no partition) exists


class Entry(NamedTuple):
    """One stream entry; fields None when it was deleted before we could read it (a named
    tuple: one is made per entry read, in a third of a frozen dataclass's time)."""

    stream_id: str
    fields: Mapping[str, str] | None


@dataclass(frozen=True)
class Lag:
    """Outbox entries not yet committed to Postgres, and the age of the oldest."""

    pending: int
    oldest_age_s: float | None


def _entries(raw: list[list[Any]] | None) -> list[Entry]:
    """The entries of an XRANGE reply, or of one stream of an XREADGROUP reply, decoded to
    text: [[id, [k, v, ...] or nil], ...] (nil: deleted, as 6.2 reports a pending one)."""
    return [Entry(sid, None if flat is None else as_map(flat)) for sid, flat in raw or ()]


def decode(entry: Entry) -> tuple[StreamId, OutboxEvent] | None:
    """An entry as (stream id, event), or None when it can never be written (logged)."""
    try:
        if entry.fields is None:
            raise ValueError("entry was deleted from the stream")
        event = decode_entry(entry.stream_id, entry.fields)
        if (
            not event.job_id
            or "\x00" in event.job_id
            or not 0 <= event.ts_ms <= _MAX_TS_MS
            or not 0 <= event.attempt < 2**31
        ):
            raise ValueError("job id, ts or attempt out of range")
        sid = parse_id(event.stream_id)
    except (ValueError, KeyError) as exc:
        log.error(
            "skipping malformed outbox entry %s: %s",
            entry.stream_id,
            exc,
            extra={"event": "audit.malformed", "stream_id": entry.stream_id},
        )
        return None
    return sid, event


class OutboxStream:
    """Consumer-group operations on `Keys(namespace).outbox` for one consumer.

    Every command goes over scheduler/store/wire.py, replies decoded to text. The consumer
    reads and acknowledges on a connection of its own (XREADGROUP may block, so
    nothing else shares it) and administers the group (claim, trim, ...) on a second;
    both stay open until aclose(). Observers (lag, wait_committed) connect for the
    call: a stream used only to observe (the flush of AuditTrail) is never closed.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        namespace: str,
        consumer: str,
        group: str = GROUP,
        partition: int | None = None,
    ) -> None:
        self._redis = redis  # where the caller's client connects (a cluster client: routed by slot)
        self._wire = make_wire(redis, decode=True)
        self._admin = make_wire(redis, decode=True)
        self.key = Keys(namespace, partition).outbox  # partition: one of a partitioned namespace's
        self.group = group
        self.consumer = consumer
        self._claim_cursor = "0-0"

    @asynccontextmanager
    async def _observing(self) -> AsyncIterator[Wire]:
        conn = make_wire(self._redis, decode=True)
        try:
            yield conn
        finally:
            await conn.aclose()

    async def ensure_group(self) -> None:
        """Create the group at the start of the stream (MKSTREAM); an existing one is kept."""
        try:
            await self._admin.call("XGROUP", "CREATE", self.key, self.group, "0", "MKSTREAM")
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def read(self, count: int, block_ms: int | None) -> list[Entry]:
        """New entries for this consumer (XREADGROUP >); block_ms None returns at once."""
        block = () if block_ms is None else ("BLOCK", block_ms)
        try:
            reply = await self._wire.call(
                "XREADGROUP",
                "GROUP",
                self.group,
                self.consumer,
                "COUNT",
                count,
                *block,
                "STREAMS",
                self.key,
                ">",
            )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self.ensure_group()  # the stream was deleted under us
            return []
        return [e for _, raw in reply or () for e in _entries(raw)]

    async def claim(self, min_idle_ms: int, count: int) -> list[Entry]:
        """Take over entries another consumer left pending longer than min_idle_ms.

        JUSTID then XRANGE per id: on Redis 6.2 XAUTOCLAIM returns a deleted
        entry as nil without its id, which would leave it pending forever.
        """
        try:
            reply = await self._admin.call(
                "XAUTOCLAIM",
                self.key,
                self.group,
                self.consumer,
                min_idle_ms,
                self._claim_cursor,
                "COUNT",
                count,
                "JUSTID",
            )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self.ensure_group()
            return []
        self._claim_cursor = reply[0]
        ids: list[str] = reply[1] or []
        # Redis >= 7 drops deleted entries from the PEL itself and lists them third:
        # report them like 6.2's, so a lost entry is logged on every version.
        deleted = [Entry(sid, None) for sid in (reply[2] if len(reply) > 2 else None) or []]
        found = await self._admin.call_many([("XRANGE", self.key, sid, sid) for sid in ids])
        return [
            Entry(sid, _entries(rows)[0].fields if rows else None) for sid, rows in zip(ids, found)
        ] + deleted

    async def claim_from_dead(self, count: int) -> list[Entry]:
        """Take over, at once, the pending entries of a consumer of this host whose process
        is gone (its name is host:pid:..., as relays name themselves, and the pid no longer
        runs): a SIGKILLed worker's batch is written again within a claim check, not after
        claim_idle_ms. Consumers of other hosts wait for claim() as before."""
        try:
            consumers = await self._admin.call("XINFO", "CONSUMERS", self.key, self.group)
        except ResponseError:
            return []
        host = socket.gethostname()
        for info in map(as_map, consumers):
            name = str(info["name"])
            their_host, _, rest = name.partition(":")
            pid = rest.partition(":")[0]
            if (
                name == self.consumer
                or int(info["pending"]) == 0
                or their_host != host
                or not pid.isdigit()
                or pid_alive(int(pid))
            ):
                continue
            pending = await self._admin.call(
                "XPENDING", self.key, self.group, "-", "+", count, name
            )
            ids = [str(p[0]) for p in pending or ()]
            if not ids:
                continue
            taken = await self._admin.call(
                "XCLAIM", self.key, self.group, self.consumer, 0, *ids, "JUSTID"
            )
            found = await self._admin.call_many([("XRANGE", self.key, sid, sid) for sid in taken])
            log.info(
                "audit relay: took over %d entries of %s (its process is gone)",
                len(taken),
                name,
                extra={"event": "audit.dead_consumer_claimed"},
            )
            return [
                Entry(sid, _entries(rows)[0].fields if rows else None)
                for sid, rows in zip(taken, found)
            ]
        return []

    async def touch(self, ids: Sequence[str]) -> None:
        """Reset the idle time of entries we hold (XCLAIM to ourselves), so that
        while Postgres is down no other relay claims a batch we are still retrying."""
        if ids:
            await self._admin.call("XCLAIM", self.key, self.group, self.consumer, 0, *ids, "JUSTID")

    @property
    def parked_key(self) -> str:
        """The stream of events the relay could never write (see park)."""
        return f"{self.key}:parked"

    async def park(self, entries: Sequence[Entry], error: str) -> None:
        """Copy entries PostgreSQL refuses for good to the parked stream (their fields, plus
        `parked_id`: the outbox id, and `parked_error`), so the relay can go on; the caller
        acknowledges them afterwards. An operator reads them with XRANGE."""
        await self._wire.call_many(
            [
                (
                    "XADD",
                    self.parked_key,
                    "*",
                    *[x for kv in (e.fields or {}).items() for x in kv],
                    "parked_id",
                    e.stream_id,
                    "parked_error",
                    error[:1000],
                )
                for e in entries
            ]
        )

    async def ack(self, ids: Sequence[str]) -> None:
        """XACK entries whose events are committed (or can never be)."""
        if ids:
            await self._wire.call("XACK", self.key, self.group, *ids)

    async def aclose(self) -> None:
        """Close this consumer's connections."""
        await self._wire.aclose()
        await self._admin.aclose()

    async def _groups(self, conn: Wire) -> list[dict[str, Any]] | None:
        """XINFO GROUPS, each group a dict (name, pending, last-delivered-id, lag on Redis >= 7)."""
        try:
            groups = await conn.call("XINFO", "GROUPS", self.key)
        except ResponseError as exc:
            if "no such key" in str(exc).lower():
                return None
            raise
        return [as_map(g) for g in groups]

    async def _first_pending(self, conn: Wire, group: str) -> StreamId | None:
        count, first, _, _ = await conn.call("XPENDING", self.key, group)
        return parse_id(first) if count and first is not None else None

    async def trim(self, approximate: bool = True) -> StreamId | None:
        """XTRIM MINID behind every group's oldest unfinished entry; return the MINID used.

        Reads each group's last-delivered id BEFORE its pending list: entries
        only move forward, so the point computed can only be too low (safe).
        """
        groups = await self._groups(self._admin)
        if not groups:
            return None
        positions: list[GroupPosition] = []
        for g in groups:
            pending = int(g["pending"])
            positions.append(
                GroupPosition(
                    g["name"],
                    parse_id(g["last-delivered-id"]),
                    pending,
                    await self._first_pending(self._admin, g["name"]) if pending else None,
                )
            )
        point = trim_point(positions)
        if point is not None:
            await self._admin.call(
                "XTRIM", self.key, "MINID", *(("~",) if approximate else ()), format_id(point)
            )
        return point

    async def lag(self, scan_limit: int = 2000) -> Lag:
        """Entries not yet committed (undelivered + pending) and the oldest one's age.

        The undelivered count comes from XINFO GROUPS `lag` on Redis >= 7; on
        6.2 from short XRANGE scans (exact while either the backlog or the
        not-yet-trimmed head is under scan_limit, else a safe overestimate).
        """
        async with self._observing() as conn:
            return await self._lag(conn, scan_limit)

    async def _lag(self, conn: Wire, scan_limit: int) -> Lag:
        groups = await self._groups(conn)
        if groups is None:
            return Lag(0, None)
        mine = next((g for g in groups if g["name"] == self.group), None)
        seconds, micros = await conn.call("TIME")
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        if mine is None:
            length = int(await conn.call("XLEN", self.key))
            first = _entries(await conn.call("XRANGE", self.key, "-", "+", "COUNT", 1))
            oldest = parse_id(first[0].stream_id) if first else None
            return Lag(length, max(0.0, (now_ms - oldest[0]) / 1000) if oldest else None)
        pending = int(mine["pending"])
        after = "(" + mine["last-delivered-id"]
        undelivered_head = _entries(await conn.call("XRANGE", self.key, after, "+", "COUNT", 1))
        raw_lag = mine.get("lag")
        if raw_lag is not None:
            undelivered = int(raw_lag)
        elif not undelivered_head:
            undelivered = 0
        else:
            undelivered = await self._count_undelivered(conn, after, pending, scan_limit)
        oldest = await self._first_pending(conn, self.group) if pending else None
        if oldest is None and undelivered_head:
            oldest = parse_id(undelivered_head[0].stream_id)
        age = max(0.0, (now_ms - oldest[0]) / 1000) if oldest is not None else None
        return Lag(pending + undelivered, age)

    async def _count_undelivered(
        self, conn: Wire, after: str, pending: int, scan_limit: int
    ) -> int:
        """Redis 6.2: count the entries after last-delivered, or the length minus those
        before it, whichever scan is short; failing both, XLEN - pending (never too low)."""
        tail = await conn.call("XRANGE", self.key, after, "+", "COUNT", scan_limit + 1)
        if len(tail) <= scan_limit:
            return len(tail)
        length = int(await conn.call("XLEN", self.key))
        head = await conn.call("XRANGE", self.key, "-", after[1:], "COUNT", scan_limit + 1)
        if len(head) <= scan_limit:
            return max(length - len(head), scan_limit + 1)
        return max(length - pending, scan_limit + 1)

    async def _last_generated(self, conn: Wire) -> StreamId | None:
        """The id of the last entry ever added (survives trimming); None without a stream."""
        try:
            info = as_map(await conn.call("XINFO", "STREAM", self.key))
        except ResponseError as exc:
            if "no such key" in str(exc).lower():
                return None
            raise
        return parse_id(info["last-generated-id"])

    async def _committed_through(self, conn: Wire, target: StreamId) -> bool:
        """Whether the group has delivered past `target` and has nothing pending at or below it."""
        groups = await self._groups(conn)
        mine = next((g for g in groups or [] if g["name"] == self.group), None)
        if mine is None or parse_id(mine["last-delivered-id"]) < target:
            return False
        if int(mine["pending"]) == 0:
            return True
        return not await conn.call("XPENDING", self.key, self.group, "-", format_id(target), 1)

    async def wait_committed(self, timeout: float, poll_s: float = 0.02) -> None:
        """Return once every entry added before the call is committed (acked after commit).

        Raises:
            TimeoutError: naming the lag, when that does not happen within `timeout`.
        """
        async with self._observing() as conn:
            target = await self._last_generated(conn)
            if target is None or target == (0, 0):
                return
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while not await self._committed_through(conn, target):
                if loop.time() >= deadline:
                    lag = await self._lag(conn, 2000)
                    age = f"{lag.oldest_age_s:.1f}s" if lag.oldest_age_s is not None else "n/a"
                    raise TimeoutError(
                        f"audit flush timed out after {timeout}s: {lag.pending} "
                        f"outbox events not yet committed to Postgres (oldest "
                        f"{age}); is an audit relay running and Postgres up?"
                    )
                await asyncio.sleep(poll_s)

    async def pending_of_self(self) -> int:
        """How many entries this consumer holds unacknowledged."""
        _, _, _, consumers = await self._admin.call("XPENDING", self.key, self.group)
        return next((int(n) for name, n in consumers or () if name == self.consumer), 0)

    async def delete_consumer(self, name: str | None = None) -> None:
        """XGROUP DELCONSUMER (callers check it holds nothing pending first)."""
        await self._admin.call("XGROUP", "DELCONSUMER", self.key, self.group, name or self.consumer)

    async def forget_dead_consumers(self, idle_ms: int) -> list[str]:
        """Delete consumers idle longer than idle_ms that hold nothing (names are per process)."""
        try:
            consumers = await self._admin.call("XINFO", "CONSUMERS", self.key, self.group)
        except ResponseError:
            return []
        gone: list[str] = []
        for info in map(as_map, consumers):
            name = info["name"]
            if name != self.consumer and int(info["pending"]) == 0 and int(info["idle"]) > idle_ms:
                await self.delete_consumer(name)
                gone.append(name)
        return gone
