"""`horae audit ...` and `horae migrate`: thin commands over the audit package.

The host CLI calls `register(cli, resolve)`; commands get `redis_url`,
`database_url`, `namespace` and the `[audit]` settings from `resolve(ctx)` (default: ctx.obj, or a
zero-argument callable stored there, called on first use so servers start
only when a command needs them).
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

import asyncpg
import click
import redis.asyncio as aioredis
from rich.console import Console
from rich.table import Table
from rich.text import Text

from audit.health import readiness
from audit.migrate import grant, migrate_url, prune
from audit.options import RelayOptions
from audit.reader import AuditTrail
from audit.records import AttemptRecord, AuditRecord
from audit.relay.consumer import AuditRelay, serve
from audit.settings import AuditSettings
from scheduler.cli.common import echo_items, echo_json, error_lines, print_table, when_text
from scheduler.core.errors import InvalidDelay, SchedulerError, StorageError
from scheduler.core.timeutil import parse_duration
from scheduler.observe.health import HealthServer, bind_host
from scheduler.store.clients import ClientSettings, redis_client
from scheduler.store.cluster_url import url_partitions

T = TypeVar("T")


class Connections(Protocol):
    """What the commands need from the context object (read-only)."""

    @property
    def redis_url(self) -> str | None: ...

    @property
    def database_url(self) -> str | None: ...

    @property
    def namespace(self) -> str: ...

    @property
    def audit(self) -> AuditSettings: ...


def _redis(conn: Connections) -> aioredis.Redis:
    """The namespace's client as every process opens it (scheduler/store/clients.py: a cluster
    client for `[cluster] enabled` too); a host object with only what Connections names gets
    the default pool size and no cluster."""
    url = _need(conn.redis_url, "Redis URL")
    return redis_client(url, conn if isinstance(conn, ClientSettings) else None)


def _need(value: str | None, what: str) -> str:
    if not value:
        raise click.ClickException(f"no {what} configured")
    return value


def _run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    try:
        return asyncio.run(main())
    except (SchedulerError, asyncpg.PostgresError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc


def _when(value: object) -> str:
    if isinstance(value, datetime):
        return when_text(value)
    return "" if value is None else str(value)


def _job_table(row: AuditRecord) -> Table:
    table = Table(title=f"job {row.id}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for name in (
        "topic",
        "status",
        "attempts",
        "max_attempts",
        "backoff_type",
        "backoff_delay_ms",
        "run_at",
        "tz",
        "created_at",
        "updated_at",
        "completed_at",
        "failed_at",
        "cancelled_at",
        "cron_name",
        "trace_id",
    ):
        table.add_row(name, _when(getattr(row, name)))
    for name in ("payload", "metadata"):
        value = getattr(row, name)
        table.add_row(name, "" if value is None else json.dumps(value, indent=1)[:2000])
    if row.last_error:  # rendered as `horae jobs show` renders it, not as raw JSON
        table.add_row("last_error", Text("\n".join(error_lines(row.last_error))))
    if row.parents:  # after= or a flow's children: the lineage Redis forgets with the job
        table.add_row("parents", Text(", ".join(row.parents)))
    return table


def _attempts_table(rows: list[AttemptRecord]) -> Table:
    table = Table(title="attempts")
    for col in ("#", "worker", "started", "outcome", "ms", "late ms"):
        table.add_column(col, no_wrap=col in ("#", "started", "outcome"))
    table.add_column("error", overflow="fold", min_width=12)
    for a in rows:
        error = f"{a.error_type}: {a.error_message}" if a.error_type or a.error_message else ""
        cells = (
            str(a.attempt),
            a.worker or "",
            _when(a.started_at),
            a.outcome or "running",
            _when(a.duration_ms),
            _when(a.lateness_ms),
            error,
        )
        table.add_row(*cells)
    return table


async def _show(conn: Connections, job_id: str, events: bool, as_json: bool = False) -> bool:
    console = Console()
    redis = _redis(conn)
    try:
        async with AuditTrail(
            redis,
            conn.namespace,
            _need(conn.database_url, "database URL"),
            RelayOptions.from_settings(conn.audit),
        ) as trail:
            row = await trail.get(job_id)
            if row is None:
                return False
            attempts = await trail.attempts(job_id)
            stored = await trail.events(job_id) if events else []
            if as_json:
                doc: dict[str, object] = {"job": row, "attempts": attempts}
                if events:
                    doc["events"] = [
                        {"stream_id": sid, "type": kind, "attempt": n, "at": ts}
                        for sid, kind, n, ts, _ in stored
                    ]
                echo_json(doc)
                return True
            print_table(console, _job_table(row))
            print_table(console, _attempts_table(attempts))
            if events:
                table = Table(title="events")
                for col in ("stream id", "type", "attempt", "ts"):
                    table.add_column(col)
                for sid, kind, attempt, ts, _ in stored:
                    table.add_row(sid, kind, str(attempt), _when(ts))
                print_table(console, table)
            return True
    finally:
        await redis.aclose()


def _since(text: str | None) -> datetime | None:
    """--since: an ISO datetime (naive: UTC) or a duration back from now ("24h", "7d")."""
    if text is None:
        return None
    try:
        return datetime.now(UTC) - timedelta(seconds=parse_duration(text, "--since"))
    except InvalidDelay:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"an ISO datetime such as 2026-11-01T00:00 (UTC) or a duration back from now "
            f"such as 24h or 7d; got {text!r}",
            param_hint="--since",
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


async def _failures(
    conn: Connections, topic: str | None, since: datetime | None, limit: int
) -> list[AuditRecord]:
    redis = _redis(conn)
    try:
        async with AuditTrail(
            redis,
            conn.namespace,
            _need(conn.database_url, "database URL"),
            RelayOptions.from_settings(conn.audit),
        ) as trail:
            return await trail.failures(topic, since, limit)
    finally:
        await redis.aclose()


def _failures_table(rows: list[AuditRecord], title: str) -> Table:
    table = Table("id", "topic", "failed at (UTC)", "attempts", "error", title=title)
    for row in rows:
        error = row.last_error or {}
        message = str(error.get("message") or "").splitlines()
        table.add_row(
            row.id,
            row.topic,
            _when(row.failed_at),
            str(row.attempts),
            f"{error.get('type') or ''}: {message[0] if message else ''}" if error else "",
        )
    return table


def _partitions(conn: Connections) -> int:
    """The namespace's partitions (docs/how-to/scaling-out.md): the URL's, else [cluster]
    partitions."""
    cluster = getattr(conn, "cluster", None)
    return url_partitions(conn.redis_url) or (cluster.partitions if cluster is not None else 1)


async def _relay(
    conn: Connections, options: RelayOptions, health_host: str | None, health_port: int | None
) -> None:
    redis = _redis(conn)
    database_url = _need(conn.database_url, "database URL")
    relay = AuditRelay(
        redis, conn.namespace, database_url, replace(options, partitions=_partitions(conn))
    )
    port = conn.audit.health_port if health_port is None else health_port
    health = (
        HealthServer(
            bind_host(conn.audit.health_host if health_host is None else health_host),
            port,
            option="--health-port ([audit] health_port)",
        )
        if port
        else None
    )

    def started() -> None:
        if health is not None:
            health.ready = readiness(redis, database_url, lambda: relay.running, conn.redis_url)
            Console().print(f"health on http://{health.host}:{health.port}/healthz and /readyz")
        Console().print(
            f"audit relay {relay.consumer} running on namespace {conn.namespace!r}; Ctrl-C stops"
        )

    def stopping(sig: signal.Signals) -> None:  # unready first, then the drain
        if health is not None:
            health.drain(f"draining after {sig.name}")

    try:
        if health is not None:
            await health.start()
        await serve(relay, started, stopping=stopping)
    finally:
        if health is not None:
            await health.close()
        await redis.aclose()


async def _prune(database_url: str, months: int) -> list[str]:
    try:
        conn = await asyncpg.connect(database_url)
    except (OSError, asyncpg.PostgresError) as exc:
        raise StorageError(f"cannot connect to PostgreSQL: {exc}") from exc
    try:
        return await prune(conn, months)
    finally:
        await conn.close()


async def _lag(conn: Connections) -> tuple[int, float | None]:
    redis = _redis(conn)
    try:
        trail = AuditTrail(
            redis,
            conn.namespace,
            conn.database_url or "",
            RelayOptions.from_settings(conn.audit, partitions=_partitions(conn)),
        )
        return await trail.lag()
    finally:
        await redis.aclose()


Resolver = Callable[[click.Context], Connections]


def _from_obj(ctx: click.Context) -> Connections:
    """Default resolver: ctx.obj itself, or what a zero-argument callable there returns."""
    obj = ctx.find_root().obj
    if obj is not None and not hasattr(obj, "database_url") and callable(obj):
        obj = obj()
        ctx.find_root().obj = obj
    if obj is None or not hasattr(obj, "database_url"):
        raise click.ClickException(
            "no settings: ctx.obj needs redis_url, database_url, namespace and audit"
        )
    return obj  # type: ignore[no-any-return]


def build_commands(resolve: Resolver = _from_obj) -> tuple[click.Group, click.Command]:
    """The `audit` group and the `migrate` command, reading connections through `resolve`."""

    @click.group("audit")
    def audit_group() -> None:
        """The Postgres audit trail: inspect jobs, run the relay, prune old partitions."""

    @audit_group.command("show")
    @click.argument("job_id")
    @click.option("--events", is_flag=True, help="Also list the raw outbox events.")
    @click.option(
        "--json",
        "as_json",
        is_flag=True,
        help='One JSON document: {"job": ..., "attempts": [...]} (and "events" with --events).',
    )
    @click.pass_context
    def show_command(ctx: click.Context, job_id: str, events: bool, as_json: bool) -> None:
        """Print a job's audit row and its attempt history."""
        if not _run(_show(resolve(ctx), job_id, events, as_json)):
            raise click.ClickException(f"job {job_id!r} is not in the audit trail")

    @audit_group.command("failures")
    @click.option("--topic", default=None, help="Only jobs of this topic.")
    @click.option(
        "--since",
        default=None,
        metavar="WHEN",
        help="Failed since an ISO datetime (naive: UTC) or a duration back from now, e.g. 24h.",
    )
    @click.option(
        "--limit",
        type=click.IntRange(1, 10_000),
        default=100,
        show_default=True,
        help="Rows at most.",
    )
    @click.option(
        "--json",
        "as_json",
        is_flag=True,
        help=(
            'One JSON object {"items": [...], "cursor": '
            "null} of the audit rows (tracebacks as lines)."
        ),
    )
    @click.pass_context
    def failures_command(
        ctx: click.Context, topic: str | None, since: str | None, limit: int, as_json: bool
    ) -> None:
        """Jobs that failed for good, newest first (`horae jobs show ID` or `audit show ID` for
        one)."""
        when = _since(since)
        conn = resolve(ctx)
        rows = _run(_failures(conn, topic, when, limit))
        if as_json:
            echo_items(rows)
            return
        title = (
            f"failed jobs in {conn.namespace}"
            + (f", topic {topic}" if topic else "")
            + (f", since {_when(when)}" if when else "")
        )
        print_table(Console(), _failures_table(rows, title))

    @audit_group.command("relay")
    @click.option(
        "--batch-size",
        type=click.IntRange(1, 50_000),
        default=None,
        help="Default: audit.batch_size.",
    )
    @click.option(
        "--block-ms", type=click.IntRange(1), default=None, help="Default: audit.block_ms."
    )
    @click.option(
        "--claim-idle-ms",
        type=click.IntRange(100),
        default=None,
        help="Default: audit.claim_idle_ms.",
    )
    @click.option(
        "--health-port",
        type=click.IntRange(1, 65_535),
        default=None,
        help="Serve GET /healthz and /readyz on this port (default [audit] health_port; 0 = off).",
    )
    @click.option(
        "--health-host",
        default=None,
        help=(
            "Address of the health port (default [audit] "
            "health_host: loopback, 0.0.0.0 in a container)."
        ),
    )
    @click.pass_context
    def relay_command(
        ctx: click.Context,
        batch_size: int | None,
        block_ms: int | None,
        claim_idle_ms: int | None,
        health_port: int | None,
        health_host: str | None,
    ) -> None:
        """Run the outbox -> Postgres relay until SIGINT/SIGTERM (the rest of its tuning: [audit]);
        /readyz turns 503 on the signal, before the relay drains."""
        conn = resolve(ctx)
        options = RelayOptions.from_settings(
            conn.audit, batch_size=batch_size, block_ms=block_ms, claim_idle_ms=claim_idle_ms
        )
        _run(_relay(conn, options, health_host, health_port))

    @audit_group.command("prune")
    @click.option(
        "--months",
        type=click.IntRange(1),
        default=None,
        help="Keep this many full months before the current one (default: audit.retention_months).",
    )
    @click.pass_context
    def prune_command(ctx: click.Context, months: int | None) -> None:
        """Drop whole monthly partitions of jobs created before the retention window."""
        conn = resolve(ctx)
        keep = months if months is not None else conn.audit.retention_months
        dropped = _run(_prune(_need(conn.database_url, "database URL"), keep))
        Console().print(
            f"dropped {len(dropped)} partitions" + (": " + ", ".join(dropped) if dropped else "")
        )

    @audit_group.command("lag")
    @click.pass_context
    def lag_command(ctx: click.Context) -> None:
        """Print how many outbox events wait for Postgres, and the oldest one's age."""
        pending, age = _run(_lag(resolve(ctx)))
        Console().print(f"pending {pending}, oldest {'-' if age is None else f'{age:.1f}s'}")

    @audit_group.command("grant")
    @click.argument("role")
    @click.option("--read-only", is_flag=True, help="Only read the audit (no relay).")
    @click.pass_context
    def grant_command(ctx: click.Context, role: str, read_only: bool) -> None:
        """Grant an existing database ROLE what a worker's relay (or, --read-only, a reader) needs;
        run as the schema owner, after `horae migrate` (docs/how-to/security.md)."""
        access = "read" if read_only else "relay"
        _run(grant(_need(resolve(ctx).database_url, "database URL"), role, access))
        Console().print(f"granted {access} access on the audit schema to {role}")

    @click.command("migrate")
    @click.pass_context
    def migrate_command(ctx: click.Context) -> None:
        """Apply the audit schema migrations (safe to run concurrently, and twice)."""
        applied = _run(migrate_url(_need(resolve(ctx).database_url, "database URL")))
        Console().print(
            f"applied migrations: {applied}" if applied else "audit schema is up to date"
        )

    return audit_group, migrate_command


def register(cli: click.Group, resolve: Resolver | None = None) -> None:
    """Add `audit` (show, failures, relay, prune, lag) and `migrate` to the host CLI.

    Args:
        cli: the host group.
        resolve: ctx -> object with `redis_url`, `database_url`, `namespace` and
            `audit` (the project's Settings). Default: ctx.obj, or the result of
            calling ctx.obj when it is a zero-argument callable.
    """
    group, migrate = build_commands(resolve or _from_obj)
    cli.add_command(group)
    cli.add_command(migrate)
