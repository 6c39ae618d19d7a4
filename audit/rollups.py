"""The console's rollups (migration 0010): what one batch of new outbox events adds to each
topic's minute and hour, and the lateness histogram's fixed log buckets. Pure: the relay
folds a batch with `BatchRollup.add` and upserts `rows()` in the batch's own transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import scheduler.core.outbox as outbox
from scheduler.core.outbox import OutboxEvent
from scheduler.core.timeutil import ms_to_utc

__all__ = [
    "BUCKETS",
    "BatchRollup",
    "bucket_of",
    "bucket_upper_ms",
    "quantile_ms",
]

# Lateness buckets: 0 holds < 1 ms (on time or early), i >= 1 holds [2^(i-1), 2^i) ms, the last
# one everything from 2^(BUCKETS-2) ms (about 18.6 h) on.
BUCKETS = 28
MINUTE_MS = 60_000
HOUR_MS = 3_600_000
_COUNTS = ("completed", "failed", "failed_attempts", "retried", "deduplicated")


def bucket_of(lateness_ms: int) -> int:
    """The lateness bucket of a start `lateness_ms` after its due time."""
    return 0 if lateness_ms < 1 else min(lateness_ms.bit_length(), BUCKETS - 1)


def bucket_upper_ms(i: int) -> int:
    """The upper bound (ms) of bucket i: what a quantile falling in it reads as."""
    return 0 if i == 0 else 2**i


def quantile_ms(buckets: Sequence[int], q: float) -> int | None:
    """The `q` quantile (0 < q <= 1) of a histogram as its bucket's upper bound; None when empty.

    The answer is within a factor of two of the exact one (log buckets), which is what a
    chart of lateness needs; the exact values are in schedule_attempts.lateness_ms."""
    total = sum(buckets)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(buckets):
        seen += n
        if seen >= rank:
            return bucket_upper_ms(i)
    return bucket_upper_ms(len(buckets) - 1)


def add_buckets(a: Sequence[int], b: Sequence[int]) -> list[int]:
    """Two histograms summed element-wise (the shorter padded with zeros)."""
    size = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(size)]


@dataclass
class _Cell:
    completed: int = 0
    failed: int = 0
    failed_attempts: int = 0
    retried: int = 0
    deduplicated: int = 0
    lateness: list[int] = field(default_factory=lambda: [0] * BUCKETS)


def _finished_ms(e: OutboxEvent) -> int:
    """When a settled attempt ended, as the audit rows say (audit/relay/fold.py finished_at)."""
    raw = e.get("finished")
    try:
        finished = int(raw) if raw else None
    except ValueError:
        finished = None
    if finished is None or not 0 <= finished < e.ts_ms:
        return e.ts_ms
    return finished


class BatchRollup:
    """What a batch's new events add per (topic, minute); `rows()` gives the upsert's rows."""

    def __init__(self) -> None:
        self._cells: dict[tuple[str, int], _Cell] = {}

    def _cell(self, topic: str, ms: int) -> _Cell:
        key = (topic, ms - ms % MINUTE_MS)
        found = self._cells.get(key)
        if found is None:
            found = self._cells[key] = _Cell()
        return found

    def add(self, topic: str, e: OutboxEvent) -> None:
        """Count event `e` of a job of `topic` (an event new to the audit: once only)."""
        kind = e.type
        if kind == outbox.COMPLETED:
            self._cell(topic, _finished_ms(e)).completed += 1
        elif kind == outbox.FAILED:
            self._cell(topic, _finished_ms(e)).failed += 1
        elif kind == outbox.ATTEMPT_FAILED:
            self._cell(topic, _finished_ms(e)).failed_attempts += 1
        elif kind == outbox.RETRY_SCHEDULED:
            self._cell(topic, e.ts_ms).retried += 1
        elif kind in (outbox.DEDUPLICATED, outbox.DEBOUNCED):
            self._cell(topic, e.ts_ms).deduplicated += 1
        elif kind == outbox.ATTEMPT_STARTED:
            due = e.get("due")
            if due and due.lstrip("-").isdigit():
                self._cell(topic, e.ts_ms).lateness[bucket_of(e.ts_ms - int(due))] += 1

    def __bool__(self) -> bool:
        return bool(self._cells)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per (topic, minute), sorted (concurrent relays lock rows in one order),
        each with its hour."""
        out: list[dict[str, Any]] = []
        for topic, minute in sorted(self._cells):
            cell = self._cells[(topic, minute)]
            row: dict[str, Any] = {
                "topic": topic,
                "minute": ms_to_utc(minute),
                "hour": ms_to_utc(minute - minute % HOUR_MS),
                "lateness": cell.lateness,
            }
            row.update({name: getattr(cell, name) for name in _COUNTS})
            out.append(row)
        return out


@dataclass(frozen=True)
class DepthSample:
    """A topic's queue depth at a minute: jobs scheduled and retrying in Redis."""

    topic: str
    minute: datetime
    waiting: int
    retrying: int

    def row(self) -> dict[str, Any]:
        ms = int(self.minute.timestamp() * 1000)
        return {
            "topic": self.topic,
            "minute": self.minute,
            "hour": ms_to_utc(ms - ms % HOUR_MS),
            "waiting": self.waiting,
            "retrying": self.retrying,
        }


@dataclass(frozen=True)
class RollupRow:
    """One topic's minute or hour as the rollups hold it (audit.reader.AuditTrail.rollups)."""

    topic: str
    at: datetime
    completed: int
    failed: int
    failed_attempts: int
    retried: int
    deduplicated: int
    lateness: tuple[int, ...]
    waiting: int | None  # the queue depth sampled then (an hour: its largest); None: no sample
    retrying: int | None
