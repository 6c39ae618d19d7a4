"""Tuning of the audit relay: every tunable is an `[audit]` setting (audit/settings.py, defaults
in config/horae.toml); `RelayOptions.from_settings` copies them, a caller may override some."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, fields, replace
from typing import Any

from audit.settings import AuditSettings


@dataclass(frozen=True, kw_only=True)
class RelayOptions:
    """Tuning of one relay: the `[audit]` settings of the same names (no defaults here: build
    with from_settings), plus who consumes and how many outbox streams there are."""

    batch_size: int
    block_ms: int
    linger_ms: int  # after a batch that was not full, wait this long so the next one is bigger
    claim_idle_ms: int
    fold_cache: int  # jobs whose fold is kept between batches (0: always re-read a job's events)
    retry_max_s: float
    retry_initial_s: float
    trim_interval_s: float
    trim_after_entries: int  # ... or as soon as this many entries were acknowledged since a trim
    trim_approximate: bool  # whole stream nodes only: cheaper, keeps a few acked entries longer
    drain_timeout_s: float
    consumer_gc_idle_ms: int
    lag_scan_limit: int
    pool_max_size: int
    connect_timeout_s: float
    command_timeout_s: float
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
        tuned = {f.name for f in fields(cls)} - {"consumer", "partitions"}
        base = cls(**{name: getattr(audit, name) for name in tuned})
        return replace(base, **{k: v for k, v in overrides.items() if v is not None})


def default_consumer_name() -> str:
    """Unique per process, so a restarted relay never inherits a dead one's entries by name."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
