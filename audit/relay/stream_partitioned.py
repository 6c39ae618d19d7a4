"""The outbox of a partitioned namespace (docs/how-to/scaling-out.md) as one stream: one consumer
group per partition's outbox (`{ns|p}:outbox`), read together, so the relay folds them as
it folds one.

Stream ids: each partition's stream numbers its own entries, so two partitions may give the
same id. The audit keys events by stream id, so an entry of partition p is handed on as
`ms-(seq * partitions + p)`: unique across partitions, and in each partition's (hence each
job's, a job living on one partition) order. Acknowledgements map the id back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import redis.asyncio as aioredis

from audit.relay.stream import GROUP, Entry, Lag, OutboxStream
from audit.relay.streamid import StreamId

POLL_BLOCK_MS = 100  # an idle read blocks on every partition at once, this long at most


class PartitionedOutbox:
    """OutboxStream's operations over every partition's outbox."""

    def __init__(
        self,
        redis: aioredis.Redis,
        namespace: str,
        consumer: str,
        partitions: int,
        group: str = GROUP,
    ) -> None:
        self.streams = [
            OutboxStream(redis, namespace, consumer, group, partition=p) for p in range(partitions)
        ]
        self.count, self.group, self.consumer = partitions, group, consumer
        self._origin: dict[
            str, tuple[int, str]
        ] = {}  # id handed on -> (partition, id in its stream)

    def _hand_on(self, p: int, entries: Sequence[Entry]) -> list[Entry]:
        out = []
        for e in entries:
            ms, _, seq = e.stream_id.partition("-")
            sid = f"{ms}-{int(seq) * self.count + p}"
            self._origin[sid] = (p, e.stream_id)
            out.append(Entry(sid, e.fields))
        return out

    def _by_partition(self, ids: Sequence[str]) -> dict[int, list[str]]:
        groups: dict[int, list[str]] = {}
        for sid in ids:
            p, raw = self._origin.get(sid, (0, sid))
            groups.setdefault(p, []).append(raw)
        return groups

    async def ensure_group(self) -> None:
        await asyncio.gather(*(s.ensure_group() for s in self.streams))

    async def read(self, count: int, block_ms: int | None) -> list[Entry]:
        """New entries of every partition; when none waits, block on all at once (shortly:
        a blocked read is never cancelled, its entries would stay pending)."""
        found = await asyncio.gather(*(s.read(count, None) for s in self.streams))
        if not any(found) and block_ms is not None:
            found = await asyncio.gather(
                *(s.read(count, min(block_ms, POLL_BLOCK_MS)) for s in self.streams)
            )
        return [e for p, entries in enumerate(found) for e in self._hand_on(p, entries)]

    async def claim(self, min_idle_ms: int, count: int) -> list[Entry]:
        found = await asyncio.gather(*(s.claim(min_idle_ms, count) for s in self.streams))
        return [e for p, entries in enumerate(found) for e in self._hand_on(p, entries)]

    async def claim_from_dead(self, count: int) -> list[Entry]:
        found = await asyncio.gather(*(s.claim_from_dead(count) for s in self.streams))
        return [e for p, entries in enumerate(found) for e in self._hand_on(p, entries)]

    async def touch(self, ids: Sequence[str]) -> None:
        await asyncio.gather(
            *(self.streams[p].touch(raw) for p, raw in self._by_partition(ids).items())
        )

    @property
    def parked_key(self) -> str:
        return self.streams[0].parked_key.replace("|0}", "|<p>}")

    async def park(self, entries: Sequence[Entry], error: str) -> None:
        groups: dict[int, list[Entry]] = {}
        for e in entries:
            p, raw = self._origin.get(e.stream_id, (0, e.stream_id))
            groups.setdefault(p, []).append(Entry(raw, e.fields))
        await asyncio.gather(*(self.streams[p].park(group, error) for p, group in groups.items()))

    async def ack(self, ids: Sequence[str]) -> None:
        await asyncio.gather(
            *(self.streams[p].ack(raw) for p, raw in self._by_partition(ids).items())
        )
        for sid in ids:
            self._origin.pop(sid, None)

    async def aclose(self) -> None:
        await asyncio.gather(*(s.aclose() for s in self.streams))

    async def trim(self, approximate: bool = True) -> StreamId | None:
        points = await asyncio.gather(*(s.trim(approximate) for s in self.streams))
        return next((p for p in points if p is not None), None)

    async def lag(self, scan_limit: int = 2000) -> Lag:
        lags = await asyncio.gather(*(s.lag(scan_limit) for s in self.streams))
        ages = [lag.oldest_age_s for lag in lags if lag.oldest_age_s is not None]
        return Lag(sum(lag.pending for lag in lags), max(ages) if ages else None)

    async def wait_committed(self, timeout: float, poll_s: float = 0.02) -> None:
        await asyncio.gather(*(s.wait_committed(timeout, poll_s) for s in self.streams))

    async def pending_of_self(self) -> int:
        return sum(await asyncio.gather(*(s.pending_of_self() for s in self.streams)))

    async def delete_consumer(self, name: str | None = None) -> None:
        await asyncio.gather(*(s.delete_consumer(name) for s in self.streams))

    async def forget_dead_consumers(self, idle_ms: int) -> list[str]:
        gone = await asyncio.gather(*(s.forget_dead_consumers(idle_ms) for s in self.streams))
        return sorted({name for names in gone for name in names})


def outbox_stream(
    redis: aioredis.Redis, namespace: str, consumer: str, partitions: int = 1
) -> OutboxStream | PartitionedOutbox:
    """The outbox of a namespace as one stream: its own, or every partition's."""
    if partitions > 1:
        return PartitionedOutbox(redis, namespace, consumer, partitions)
    return OutboxStream(redis, namespace, consumer)
