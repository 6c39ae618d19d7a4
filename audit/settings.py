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

    enabled: bool = Field(
        True,
        description="Every state change writes an outbox event (every process of a namespace "
        "must agree).",
    )
    relay: bool = Field(
        True,
        description="This process also relays the outbox into PostgreSQL (workers and `horae "
        "audit relay`); off, only Redis is needed.",
    )
    # audit/relay/child.py: a busy worker never shares a GIL with its relay.
    relay_process: bool = Field(
        True,
        description="The relay runs in a child process of the worker's, with its own "
        "interpreter: the worker never waits on it.",
    )
    # audit/relay/thread.py (embedded use, the pytest plugin).
    relay_thread: bool = Field(
        True,
        description="With relay_process false: the relay on a thread of its own, so folding a "
        "batch never holds the worker's loop; false: on the loop of the process's first worker.",
    )
    batch_size: int = Field(
        2_000,
        ge=1,
        le=50_000,
        description="Outbox events per PostgreSQL transaction (larger batches relay more "
        "events/s).",
    )
    block_ms: int = Field(
        1_000, ge=1, description="How long one read of the outbox waits for new events."
    )
    claim_idle_ms: int = Field(
        30_000,
        ge=100,
        description="Entries pending this long on a dead relay are taken over.",
    )
    linger_ms: int = Field(
        100,
        ge=0,
        le=10_000,
        description="After a partial batch, wait this long so the next one is bigger.",
    )
    fold_cache: int = Field(
        20_000,
        ge=0,
        description="Unfinished jobs whose fold a relay keeps between batches (0: always re-read).",
    )
    retention_months: int = Field(
        12, ge=1, description="`horae audit prune` drops partitions older than this."
    )
    health_port: int = Field(
        0,
        ge=0,
        le=65_535,
        description="Port of the /healthz and /readyz of `horae audit relay` (also "
        "--health-port); 0 = not served.",
    )
    health_host: str = Field(
        "",
        description='Address of the health endpoints: "" = 127.0.0.1, or 0.0.0.0 in a container.',
    )
    # The relay's own timings (audit/relay/): a relay inside a worker process suits these.
    retry_max_s: float = Field(
        5.0,
        gt=0,
        description="Longest wait before retrying after a failure (Redis or PostgreSQL down).",
    )
    retry_initial_s: float = Field(
        0.05, gt=0, description="The first such wait; it doubles up to retry_max_s."
    )
    trim_interval_s: float = Field(
        2.0, gt=0, description="The outbox is trimmed of relayed entries this often ..."
    )
    trim_after_entries: int = Field(
        2_000,
        ge=1,
        description="... or as soon as this many were acknowledged since the last trim.",
    )
    trim_approximate: bool = Field(
        True,
        description="Trim whole stream nodes only: cheaper, keeps a few relayed entries longer.",
    )
    drain_timeout_s: float = Field(
        5.0,
        ge=0,
        description="At stop, how long the events already read may still reach PostgreSQL.",
    )
    consumer_gc_idle_ms: int = Field(
        3_600_000,
        ge=1,
        description="Relay consumers idle this long (dead relays) are removed.",
    )
    lag_scan_limit: int = Field(
        2_000, ge=1, description="`horae audit lag`: most pending entries looked at."
    )
    pool_max_size: int = Field(
        2,
        ge=1,
        le=1_000,
        description="PostgreSQL connections of one relay (or audit reader).",
    )
    connect_timeout_s: float = Field(5.0, gt=0, description="PostgreSQL connect timeout.")
    command_timeout_s: float = Field(30.0, gt=0, description="Timeout of one PostgreSQL statement.")


class AuditedSettings(EngineSettings, Protocol):
    """The settings as the audit reads them: the engine's, and the whole `[audit]` section
    (the root Settings of horae/settings.py satisfies it)."""

    @property
    def audit(self) -> AuditSettings: ...
