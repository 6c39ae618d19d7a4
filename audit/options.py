"""Tuning of the audit relay: what `[audit]` configures comes from Settings
(`RelayOptions.from_settings`); the rest are the relay's internal timings."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, replace
from typing import Any

from scheduler.core.config import AuditSettings


@dataclass(frozen=True, kw_only=True)
class RelayOptions:
    """Tuning of one relay. The first five fields are `[audit]` settings (no defaults
    here: build with from_settings); the rest suit a relay inside a worker process."""

    batch_size: int
    block_ms: int
    linger_ms: int  # after a batch that was not full, wait this long so the next one is bigger
    claim_idle_ms: int
    fold_cache: int  # jobs whose fold is kept between batches (0: always re-read a job's events)
    retry_max_s: float = 5.0
    retry_initial_s: float = 0.05
    trim_interval_s: float = 2.0
    trim_after_entries: int = (
        2_000  # ... or as soon as this many entries were acknowledged since the last trim
    )
    trim_approximate: bool = (
        True  # whole stream nodes only: cheaper, keeps a few acked entries longer
    )
    drain_timeout_s: float = 5.0
    consumer_gc_idle_ms: int = 3_600_000
    lag_scan_limit: int = 2_000
    pool_max_size: int = 2
    connect_timeout_s: float = 5.0
    command_timeout_s: float = 30.0
    consumer: str | None = None  # default: unique per process (host:pid:random)
    partitions: int = 1  # the namespace's ([cluster] partitions): one outbox stream per partition

    def __post_init__(self) -> None:
        if (
            self.batch_size < 1
            or self.block_ms < 1
            or self.claim_idle_ms < 1
            or self.trim_after_entries < 1
        ):
            raise ValueError(
                "batch_size, block_ms, claim_idle_ms and trim_after_entries must be positive"
            )
        if self.linger_ms < 0:
            raise ValueError("linger_ms must not be negative")
        if self.retry_max_s <= 0 or self.retry_initial_s <= 0:
            raise ValueError("retry delays must be positive")

    @classmethod
    def from_settings(cls, audit: AuditSettings, **overrides: Any) -> RelayOptions:
        """The options of `[audit]`, with `overrides` (None values ignored) on top.

        Raises:
            ValueError: for an invalid combination.
        """
        base = cls(
            batch_size=audit.batch_size,
            block_ms=audit.block_ms,
            linger_ms=audit.linger_ms,
            claim_idle_ms=audit.claim_idle_ms,
            fold_cache=audit.fold_cache,
        )
        return replace(base, **{k: v for k, v in overrides.items() if v is not None})


def default_consumer_name() -> str:
    """Unique per process, so a restarted relay never inherits a dead one's entries by name."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
