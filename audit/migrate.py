"""Schema management: apply the versioned SQL files of audit/migrations under
an advisory lock, create monthly partitions on demand, drop old ones."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from importlib import resources

import asyncpg

from audit.sql import query
from scheduler.core.errors import StorageError

log = logging.getLogger("horae.audit")

# pg_advisory_lock key of the migrator ("horae" in ASCII); held for the whole run.
MIGRATION_LOCK = 0x686F726165
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    """One SQL file; the checksum catches a file edited after it ran."""

    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations() -> list[Migration]:
    """The package's migration files in version order.

    Raises:
        ValueError: for a misnamed file or a repeated version.
    """
    found: dict[int, Migration] = {}
    for entry in resources.files("audit").joinpath("migrations").iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE.match(entry.name)
        if match is None:
            raise ValueError(f"migration file {entry.name!r} is not named NNNN_name.sql")
        version = int(match.group(1))
        if version in found:
            raise ValueError(f"migration version {version} appears twice")
        found[version] = Migration(version, match.group(2), entry.read_text(encoding="utf-8"))
    return [found[v] for v in sorted(found)]


def month_start(moment: datetime) -> date:
    """First day of the UTC month of `moment`."""
    utc = moment.astimezone(UTC)
    return date(utc.year, utc.month, 1)


def add_months(day: date, months: int) -> date:
    """First day of the month `months` after the month of `day` (negative: before)."""
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


async def migrate(conn: asyncpg.Connection, now: datetime | None = None) -> list[int]:
    """Apply the migrations this database has not run yet; return their versions.

    Safe to run from several processes at once: they queue on an advisory lock
    and the later ones find nothing to do. Also makes sure the partitions of
    the current and the next month exist.

    Raises:
        StorageError: when a migration that already ran was edited since.
    """
    await conn.execute(query("advisory_lock"), MIGRATION_LOCK)
    try:
        if not await conn.fetchval(query("schema_version_exists")):
            await _as_owner(
                conn, "create_schema_version", conn.execute(query("create_schema_version"))
            )
        applied = {r["version"]: r for r in await conn.fetch(query("applied_migrations"))}
        done: list[int] = []
        for migration in load_migrations():
            seen = applied.get(migration.version)
            if seen is not None:
                if seen["checksum"] != migration.checksum:
                    raise StorageError(
                        f"audit migration {migration.version:04d}_{migration.name} "
                        f"changed after it was "
                        "applied; migrations are append-only, add a new one instead"
                    )
                continue
            await _as_owner(
                conn, f"{migration.version:04d}_{migration.name}", _apply(conn, migration)
            )
            log.info(
                "applied audit migration %04d_%s",
                migration.version,
                migration.name,
                extra={"event": "audit.migrated", "version": migration.version},
            )
            done.append(migration.version)
    finally:
        await conn.execute(query("advisory_unlock"), MIGRATION_LOCK)
    current = month_start(now or datetime.now(UTC))
    try:
        await ensure_partitions(conn, [current, add_months(current, 1)])
    except asyncpg.InsufficientPrivilegeError as exc:
        raise StorageError(
            f"this database role may not use the audit schema ({exc}): the schema owner "
            "grants it with `horae audit grant ROLE` (docs/how-to/security.md)"
        ) from exc
    return done


async def _apply(conn: asyncpg.Connection, migration: Migration) -> None:
    async with conn.transaction():
        await conn.execute(migration.sql)
        await conn.execute(
            query("record_migration"), migration.version, migration.name, migration.checksum
        )


async def _as_owner(conn: asyncpg.Connection, what: str, step: Awaitable[object]) -> None:
    """Run a schema change; a role without the right to make it (least privilege: workers
    and readers connect as roles that may not) is told to run `horae migrate` as the owner."""
    try:
        await step
    except asyncpg.InsufficientPrivilegeError as exc:
        raise StorageError(
            f"audit migration {what} is not applied yet and "
            f"this database role may not apply it ({exc}): "
            "run `horae migrate` with the schema owner's database "
            "URL, then `horae audit grant ROLE` (docs/how-to/security.md)"
        ) from exc


async def migrate_url(database_url: str) -> list[int]:
    """`migrate` on a connection of its own.

    Raises:
        StorageError: when the database cannot be reached or a migration fails.
    """
    try:
        conn = await asyncpg.connect(database_url)
    except (OSError, asyncpg.PostgresError) as exc:
        raise StorageError(f"cannot connect to PostgreSQL for migrations: {exc}") from exc
    try:
        return await migrate(conn)
    except asyncpg.PostgresError as exc:
        raise StorageError(f"audit migration failed: {exc}") from exc
    finally:
        await conn.close()


async def grant(database_url: str, role: str, access: str) -> None:
    """Grant `role` what the audit needs ('read': read the audit; 'relay': also write it), as the
    schema owner (migration 0007's audit_grant; docs/how-to/security.md). The role must exist.

    Raises:
        StorageError: the database cannot be reached, the role is unknown, or the caller does
            not own the schema.
        ValueError: `access` is neither 'read' nor 'relay'.
    """
    if access not in ("read", "relay"):
        raise ValueError(f"access must be 'read' or 'relay', got {access!r}")
    try:
        conn = await asyncpg.connect(database_url)
    except (OSError, asyncpg.PostgresError) as exc:
        raise StorageError(f"cannot connect to PostgreSQL to grant access: {exc}") from exc
    try:
        await conn.execute(query("grant_access"), role, access)
    except asyncpg.PostgresError as exc:
        # What to do depends on what failed: a missing role is created, not migrated for.
        hint = (
            f"create it first: CREATE ROLE {role} LOGIN"
            if isinstance(exc, asyncpg.UndefinedObjectError)  # 42704: no such role
            else "run `horae migrate` first, as the schema owner"
        )
        raise StorageError(
            f"granting {access} access on the audit schema to {role!r} failed: {exc} ({hint})"
        ) from exc
    finally:
        await conn.close()


async def ensure_partitions(conn: asyncpg.Connection, months: Iterable[date]) -> None:
    """Create the monthly partitions of all audit tables for these months (idempotent)."""
    for month in sorted(set(months)):
        await conn.execute(query("ensure_partitions"), month)


async def prune(conn: asyncpg.Connection, months: int, now: datetime | None = None) -> list[str]:
    """Drop whole partitions of jobs created before the last `months` full months.

    With months=3 in November, jobs created from August on are kept.

    Returns:
        The names of the dropped partitions.

    Raises:
        ValueError: when months < 1.
    """
    if months < 1:
        raise ValueError("months must be at least 1")
    cutoff = add_months(month_start(now or datetime.now(UTC)), -months)
    rows = await conn.fetch(
        query("drop_partitions"), datetime(cutoff.year, cutoff.month, 1, tzinfo=UTC)
    )
    dropped = [str(r["name"]) for r in rows]
    if dropped:
        log.info(
            "pruned %d audit partitions older than %s",
            len(dropped),
            cutoff,
            extra={"event": "audit.pruned", "partitions": dropped},
        )
    return dropped
