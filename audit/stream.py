"""The outbox stream as the `audit` consumer group sees it: read, claim from
dead consumers, acknowledge, trim behind the slowest group, measure lag and
wait for a commit point. Only Redis 6.2 commands are used."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from audit.streamid import GroupPosition, StreamId, format_id, parse_id, trim_point
from scheduler.keys import Keys
from scheduler.outbox import OutboxEvent, event_from_fields
from scheduler.wire import Endpoint, WireConnection

log = logging.getLogger("horae.audit")

GROUP = "audit"
_MAX_TS_MS = 253_402_300_799_999  # 9999-12-31: beyond it no datetime (and no partition) exists


@dataclass(frozen=True)
class Entry:
    """One stream entry; fields None when it was deleted before we could read it."""

    stream_id: str
    fields: Mapping[str, str] | None


@dataclass(frozen=True)
class Lag:
    """Outbox entries not yet committed to Postgres, and the age of the oldest."""

    pending: int
    oldest_age_s: float | None


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _fields(raw: object) -> dict[str, str] | None:
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        return {_text(k): _text(v) for k, v in raw.items()}
    items = list(raw)  # type: ignore[call-overload]
    return {_text(items[i]): _text(items[i + 1]) for i in range(0, len(items) - 1, 2)}


def _wire_entries(raw: list[list[Any]]) -> list[Entry]:
    """Entries of a RESP2 XREADGROUP reply decoded to str: [[id, [k, v, ...] or nil], ...]."""
    out = []
    for sid, flat in raw:
        out.append(Entry(sid, None if flat is None else dict(zip(flat[::2], flat[1::2]))))
    return out


def _entries(raw: object) -> list[Entry]:
    out: list[Entry] = []
    for item in raw or []:  # type: ignore[attr-defined]
        if item is None or item[0] is None:
            continue
        out.append(Entry(_text(item[0]), _fields(item[1])))
    return out


def decode(entry: Entry) -> tuple[StreamId, OutboxEvent] | None:
    """An entry as (stream id, event), or None when it can never be written (logged)."""
    try:
        if entry.fields is None:
            raise ValueError("entry was deleted from the stream")
        fields = entry.fields if isinstance(entry.fields, dict) else dict(entry.fields)
        event = event_from_fields(entry.stream_id, fields)
        if not event.job_id or "\x00" in event.job_id or not 0 <= event.ts_ms <= _MAX_TS_MS \
                or not 0 <= event.attempt < 2**31:
            raise ValueError("job id, ts or attempt out of range")
        sid = parse_id(event.stream_id)
    except (ValueError, KeyError) as exc:
        log.error("skipping malformed outbox entry %s: %s", entry.stream_id, exc,
                  extra={"event": "audit.malformed", "stream_id": entry.stream_id})
        return None
    return sid, event


def _raw_reply(response: object, **options: object) -> object:
    return response


class OutboxStream:
    """Consumer-group operations on `Keys(namespace).outbox` for one consumer."""

    def __init__(self, redis: aioredis.Redis, namespace: str, consumer: str, group: str = GROUP) -> None:
        # Our own client object on the caller's connection pool, so the raw
        # XAUTOCLAIM reply callback below never changes the caller's client.
        self._r = aioredis.Redis(connection_pool=redis.connection_pool)
        # The hot pair (read, ack) on a connection of this consumer's own: hiredis
        # decodes the entries straight to str (scheduler/wire.py). It may block in
        # XREADGROUP, so nothing else may share it.
        self._wire = WireConnection(Endpoint.of_pool(redis.connection_pool), decode=True)
        self._r.set_response_callback("XAUTOCLAIM", _raw_reply)
        self.key = Keys(namespace).outbox
        self.group = group
        self.consumer = consumer
        self._claim_cursor = "0-0"

    async def ensure_group(self) -> None:
        """Create the group at the start of the stream (MKSTREAM); an existing one is kept."""
        try:
            await self._r.xgroup_create(self.key, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def read(self, count: int, block_ms: int | None) -> list[Entry]:
        """New entries for this consumer (XREADGROUP >); block_ms None returns at once."""
        block = () if block_ms is None else ("BLOCK", block_ms)
        try:
            reply = await self._wire.call("XREADGROUP", "GROUP", self.group, self.consumer, "COUNT", count, *block,
                                          "STREAMS", self.key, ">")
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self.ensure_group()  # the stream was deleted under us
            return []
        return [e for _, raw in reply or () for e in _wire_entries(raw)]

    async def claim(self, min_idle_ms: int, count: int) -> list[Entry]:
        """Take over entries another consumer left pending longer than min_idle_ms.

        JUSTID then XRANGE per id: on Redis 6.2 XAUTOCLAIM returns a deleted
        entry as nil without its id, which would leave it pending forever.
        """
        try:
            reply = await self._r.xautoclaim(self.key, self.group, self.consumer, min_idle_ms,
                                             start_id=self._claim_cursor, count=count, justid=True)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self.ensure_group()
            return []
        parts = list(reply)
        self._claim_cursor = _text(parts[0])
        ids = [_text(i) for i in parts[1] or []]
        # Redis >= 7 drops deleted entries from the PEL itself and lists them third:
        # report them like 6.2's, so a lost entry is logged on every version.
        deleted = [Entry(_text(i), None) for i in (parts[2] if len(parts) > 2 else None) or []]
        if not ids:
            return deleted
        pipe = self._r.pipeline(transaction=False)
        for sid in ids:
            pipe.xrange(self.key, sid, sid)
        found = await pipe.execute()
        return [Entry(sid, _entries(rows)[0].fields if rows else None) for sid, rows in zip(ids, found)] + deleted

    async def touch(self, ids: Sequence[str]) -> None:
        """Reset the idle time of entries we hold (XCLAIM to ourselves), so that
        while Postgres is down no other relay claims a batch we are still retrying."""
        if ids:
            await self._r.xclaim(self.key, self.group, self.consumer, 0, list(ids), justid=True)

    async def ack(self, ids: Sequence[str]) -> None:
        """XACK entries whose events are committed (or can never be)."""
        if ids:
            await self._wire.call("XACK", self.key, self.group, *ids)

    async def aclose(self) -> None:
        """Close this consumer's own connection (the shared pool stays open)."""
        await self._wire.aclose()

    async def _groups(self) -> list[dict[str, object]] | None:
        try:
            groups = await self._r.xinfo_groups(self.key)
        except ResponseError as exc:
            if "no such key" in str(exc).lower():
                return None
            raise
        return [{_text(k): v for k, v in g.items()} for g in groups]

    async def _first_pending(self, group: str) -> StreamId | None:
        summary = await self._r.xpending(self.key, group)
        if not summary or not summary.get("pending") or summary.get("min") is None:
            return None
        return parse_id(_text(summary["min"]))

    async def trim(self, approximate: bool = True) -> StreamId | None:
        """XTRIM MINID behind every group's oldest unfinished entry; return the MINID used.

        Reads each group's last-delivered id BEFORE its pending list: entries
        only move forward, so the point computed can only be too low (safe).
        """
        groups = await self._groups()
        if not groups:
            return None
        positions: list[GroupPosition] = []
        for g in groups:
            name = _text(g["name"])
            pending = int(_text(g["pending"]))
            positions.append(GroupPosition(
                name, parse_id(_text(g["last-delivered-id"])), pending,
                await self._first_pending(name) if pending else None,
            ))
        point = trim_point(positions)
        if point is not None:
            await self._r.xtrim(self.key, minid=format_id(point), approximate=approximate)
        return point

    async def _redis_now_ms(self) -> int:
        seconds, micros = await self._r.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def lag(self, scan_limit: int = 2000) -> Lag:
        """Entries not yet committed (undelivered + pending) and the oldest one's age.

        The undelivered count comes from XINFO GROUPS `lag` on Redis >= 7; on
        6.2 from short XRANGE scans (exact while either the backlog or the
        not-yet-trimmed head is under scan_limit, else a safe overestimate).
        """
        groups = await self._groups()
        if groups is None:
            return Lag(0, None)
        mine = next((g for g in groups if _text(g["name"]) == self.group), None)
        now_ms = await self._redis_now_ms()
        if mine is None:
            length = int(await self._r.xlen(self.key))
            first = _entries(await self._r.xrange(self.key, "-", "+", count=1))
            oldest = parse_id(first[0].stream_id) if first else None
            return Lag(length, max(0.0, (now_ms - oldest[0]) / 1000) if oldest else None)
        pending = int(_text(mine["pending"]))
        after = "(" + _text(mine["last-delivered-id"])
        undelivered_head = _entries(await self._r.xrange(self.key, after, "+", count=1))
        raw_lag = mine.get("lag")
        if raw_lag is not None:
            undelivered = int(_text(raw_lag))
        elif not undelivered_head:
            undelivered = 0
        else:
            undelivered = await self._count_undelivered(after, pending, scan_limit)
        oldest = await self._first_pending(self.group) if pending else None
        if oldest is None and undelivered_head:
            oldest = parse_id(undelivered_head[0].stream_id)
        age = max(0.0, (now_ms - oldest[0]) / 1000) if oldest is not None else None
        return Lag(pending + undelivered, age)

    async def _count_undelivered(self, after: str, pending: int, scan_limit: int) -> int:
        """Redis 6.2: count the entries after last-delivered, or the length minus those
        before it, whichever scan is short; failing both, XLEN - pending (never too low)."""
        tail = await self._r.xrange(self.key, after, "+", count=scan_limit + 1)
        if len(tail or []) <= scan_limit:
            return len(tail or [])
        length = int(await self._r.xlen(self.key))
        head = await self._r.xrange(self.key, "-", after[1:], count=scan_limit + 1)
        if len(head or []) <= scan_limit:
            return max(length - len(head or []), scan_limit + 1)
        return max(length - pending, scan_limit + 1)

    async def last_generated(self) -> StreamId | None:
        """The id of the last entry ever added (survives trimming); None without a stream."""
        try:
            info = await self._r.xinfo_stream(self.key)
        except ResponseError as exc:
            if "no such key" in str(exc).lower():
                return None
            raise
        return parse_id(_text(info["last-generated-id"]))

    async def committed_through(self, target: StreamId) -> bool:
        """Whether the group has delivered past `target` and has nothing pending at or below it."""
        groups = await self._groups()
        mine = next((g for g in groups or [] if _text(g["name"]) == self.group), None)
        if mine is None or parse_id(_text(mine["last-delivered-id"])) < target:
            return False
        if int(_text(mine["pending"])) == 0:
            return True
        first = await self._r.xpending_range(self.key, self.group, min="-", max=format_id(target), count=1)
        return not first

    async def wait_committed(self, timeout: float, poll_s: float = 0.02) -> None:
        """Return once every entry added before the call is committed (acked after commit).

        Raises:
            TimeoutError: naming the lag, when that does not happen within `timeout`.
        """
        target = await self.last_generated()
        if target is None or target == (0, 0):
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not await self.committed_through(target):
            if loop.time() >= deadline:
                lag = await self.lag()
                age = f"{lag.oldest_age_s:.1f}s" if lag.oldest_age_s is not None else "n/a"
                raise TimeoutError(
                    f"audit flush timed out after {timeout}s: {lag.pending} outbox events not yet "
                    f"committed to Postgres (oldest {age}); is an audit relay running and Postgres up?"
                )
            await asyncio.sleep(poll_s)

    async def pending_of_self(self) -> int:
        """How many entries this consumer holds unacknowledged."""
        summary = await self._r.xpending(self.key, self.group)
        for c in (summary or {}).get("consumers", []):
            if _text(c["name"]) == self.consumer:
                return int(c["pending"])
        return 0

    async def delete_consumer(self, name: str | None = None) -> None:
        """XGROUP DELCONSUMER (callers check it holds nothing pending first)."""
        await self._r.xgroup_delconsumer(self.key, self.group, name or self.consumer)

    async def forget_dead_consumers(self, idle_ms: int) -> list[str]:
        """Delete consumers idle longer than idle_ms that hold nothing (names are per process)."""
        try:
            consumers = await self._r.xinfo_consumers(self.key, self.group)
        except ResponseError:
            return []
        gone: list[str] = []
        for c in consumers:
            info = {_text(k): v for k, v in c.items()}
            name = _text(info["name"])
            if name != self.consumer and int(_text(info["pending"])) == 0 and int(_text(info["idle"])) > idle_ms:
                await self.delete_consumer(name)
                gone.append(name)
        return gone
