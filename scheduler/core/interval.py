"""Interval triggers (`every="15m"`, optional jitter): tick instants at whole multiples of
the interval since the Unix epoch, each moved later by a per-tick offset. Pure (no I/O).

The anchor is the epoch, not the schedule's creation, so every worker, and a worker
restarted next week, computes the same ticks from the interval alone (nothing to store,
nothing reset by an unchanged upsert): "15m" ticks at :00, :15, :30, :45 UTC, "1h" on the
hour, "1d" at 00:00 UTC. The jitter offset of the tick at slot s is a hash of (schedule
name, s) modulo the jitter, in [0, jitter) with jitter <= interval: deterministic, so
every worker plans the same instant and a tick's job id (cron:{name}:{instant}) is
stable; each tick stays inside its own interval, so ticks never swap or merge.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from scheduler.core.errors import InvalidCron


@dataclass(frozen=True)
class IntervalSpec:
    """A validated interval trigger; build it with `parse_interval`."""

    every_ms: int
    jitter_ms: int  # 0: none; else offsets in [0, jitter_ms), jitter_ms <= every_ms
    seed: str  # the schedule's name: schedules with one interval spread apart

    def offset(self, slot_ms: int) -> int:
        """The jitter of the tick of `slot_ms` (a multiple of every_ms)."""
        if self.jitter_ms <= 0:
            return 0
        digest = hashlib.blake2b(f"{self.seed}:{slot_ms}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") % self.jitter_ms

    def next_fire(self, after_ms: int) -> int:
        """The first tick instant strictly after `after_ms` (epoch ms)."""
        slot = (
            after_ms // self.every_ms * self.every_ms
        )  # the slot holding after_ms: earlier ones fired before it
        fire = slot + self.offset(slot)
        if fire > after_ms:
            return fire
        slot += self.every_ms
        return slot + self.offset(slot)


def parse_interval(every_ms: int, jitter_ms: int, seed: str) -> IntervalSpec:
    """Check a stored or declared interval.

    Raises:
        InvalidCron: field "every" below one second, or "jitter" outside [0, every].
    """
    if every_ms < 1000:
        raise InvalidCron(f"every must be at least 1s; got {every_ms} ms", field="every")
    if not 0 <= jitter_ms <= every_ms:
        raise InvalidCron(
            f"jitter must be between 0 and the interval ({every_ms} ms); got {jitter_ms} ms",
            field="jitter",
        )
    return IntervalSpec(every_ms, jitter_ms, seed)
