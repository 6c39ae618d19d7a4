"""The `[audit]` section: the outbox switch, the relay and its tunables, beside the package
that reads them; composed with the others by the root (horae/settings.py). Defaults:
config/horae.toml (tests/unit/test_config.py keeps the two equal). The engine reads only
`enabled` (scheduler.core.config.OutboxSwitch)."""

from __future__ import annotations

from typing import Protocol

from pydantic import Field

from scheduler.core.config import Section
from scheduler.core.config import Settings as EngineSettings


class AuditSettings(Section):
    """The Postgres audit trail and its relay.

    enabled: every state change writes an outbox event (all processes of a
    namespace must agree). relay: this process also moves the outbox into
    Postgres (workers and `horae audit relay`); off, only Redis is needed.
    """

    enabled: bool = True
    relay: bool = True
    # The relay in a child process of the worker's (audit/relay/child.py): its own interpreter,
    # so a busy worker never shares a GIL with it (the default: a worker on time under load).
    relay_process: bool = True
    # With relay_process false (embedded use, the pytest plugin): the relay on a thread of its
    # own (audit/relay/thread.py), so folding a batch never holds the worker's loop; false:
    # on the loop of the process's first worker.
    relay_thread: bool = True
    batch_size: int = Field(2_000, ge=1, le=50_000)
    block_ms: int = Field(1_000, ge=1)
    claim_idle_ms: int = Field(30_000, ge=100)
    linger_ms: int = Field(100, ge=0, le=10_000)
    fold_cache: int = Field(20_000, ge=0)
    retention_months: int = Field(12, ge=1)
    # /healthz and /readyz of `horae audit relay` (0 = not served; host as [worker] health_host).
    health_port: int = Field(0, ge=0, le=65_535)
    health_host: str = ""
    # The relay's own timings (audit/relay/): a relay inside a worker process suits these.
    retry_max_s: float = Field(5.0, gt=0)  # longest wait before retrying after a failure
    retry_initial_s: float = Field(0.05, gt=0)  # first such wait; doubles up to retry_max_s
    trim_interval_s: float = Field(2.0, gt=0)  # the outbox is trimmed this often ...
    trim_after_entries: int = Field(2_000, ge=1)  # ... or once this many entries were acked
    trim_approximate: bool = True  # whole stream nodes only: cheaper, keeps a few acked longer
    drain_timeout_s: float = Field(5.0, ge=0)  # at stop, how long what was read may still land
    consumer_gc_idle_ms: int = Field(3_600_000, ge=1)  # relay consumers idle this long: removed
    lag_scan_limit: int = Field(2_000, ge=1)  # most pending entries `audit lag` looks at
    pool_max_size: int = Field(2, ge=1, le=1_000)  # PostgreSQL connections of one relay/reader
    connect_timeout_s: float = Field(5.0, gt=0)  # PostgreSQL connect
    command_timeout_s: float = Field(30.0, gt=0)  # one PostgreSQL statement


class AuditedSettings(EngineSettings, Protocol):
    """The settings as the audit reads them: the engine's, and the whole `[audit]` section
    (the root Settings of horae/settings.py satisfies it)."""

    @property
    def audit(self) -> AuditSettings: ...
