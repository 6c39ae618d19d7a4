"""What a partition migration checks before it moves anything (no live worker, no running job,
no job waiting for parents, the audit outbox relayed) and what `horae partitions status` shows."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.keys import Keys
from scheduler.ops.migrate_store import MigrationStore
from scheduler.ops.migration_plan import all_tags, tags
from scheduler.store.pipe import as_map
from scheduler.worker.advertise import live_workers


@dataclass(frozen=True)
class Layout:
    """The namespace's stored layout: its count, and the migration in progress (None: none)."""

    partitions: int
    migrating_to: int | None
    migrating_from: int | None
    started: str
    by: str
    moved: int

    @property
    def counts(self) -> tuple[int, int] | None:
        """(from, to) of the migration in progress."""
        if self.migrating_to is None or self.migrating_from is None:
            return None
        return self.migrating_from, self.migrating_to


async def read_layout(store: MigrationStore) -> Layout:
    """The layout in `{ns}:meta`; a namespace without one is unpartitioned (1)."""
    meta = await store.meta()
    to, frm = meta.get("migrating_to"), meta.get("migrating_from")
    return Layout(
        partitions=int(meta.get("partitions") or 1),
        migrating_to=int(to) if to else None,
        migrating_from=int(frm) if frm else None,
        started=meta.get("migration_started", ""),
        by=meta.get("migration_by", ""),
        moved=int(meta.get("migration_moved") or 0),
    )


async def problems(
    store: MigrationStore, old: int, new: int, now_ms: int, outbox_group: str
) -> list[str]:
    """Why the migration from `old` to `new` partitions cannot run now (empty: it can), each naming
    the counts and what to do."""
    found: list[str] = []
    every = all_tags(store.namespace, old, new)
    entries: dict[str, str] = {}
    for flat in await store.many([("HGETALL", k.workers) for k in every]):
        entries.update(as_map(flat))
    live = live_workers(entries, now_ms)
    if live:
        names = ", ".join(f"{w.id} ({w.host} pid {w.pid})" for w in live[:5]) + (
            " ..." if len(live) > 5 else ""
        )
        found.append(
            f"{len(live)} live worker(s) still beat: {names}; "
            f"stop every worker of the namespace (their "
            "heartbeat lapses within its TTL after a kill)"
        )
    running = sum(int(n) for n in await store.many([("ZCARD", k.active) for k in every]))
    if running:
        found.append(
            f"{running} job(s) are leased (running): let their workers finish and stop them first"
        )
    waiting = sum(int(n) for n in await store.many([("ZCARD", k.waiting_parents) for k in every]))
    if waiting:
        # A child lives on its parents' partition, not where its own id or key would route it:
        # moved by its own route it would leave them (docs/how-to/dependencies.md).
        found.append(
            f"{waiting} job(s) wait for parents (after=, a flow): let them run, or cancel or "
            "delete them (`horae jobs list --state waiting_for_parents`), then migrate"
        )
    unrelayed = 0
    for k in every:
        unrelayed += await store.unrelayed(k, outbox_group)
    if unrelayed:
        found.append(
            f"{unrelayed} audit outbox event(s) are not relayed "
            f"yet: run `horae audit relay` (or a worker "
            "with the relay on) until `horae audit lag` says pending 0"
        )
    return found


async def job_counts(store: MigrationStore, layout: Keys) -> int:
    """The jobs a partition holds, by its counts hash."""
    return sum(int(v) for v in as_map(await store.call("HGETALL", layout.counts)).values())


async def status_lines(store: MigrationStore, configured: int) -> list[str]:
    """`horae partitions status`: the stored count, this process's, the migration in progress and
    the jobs each partition holds."""
    lay = await read_layout(store)
    lines = [
        f"namespace: {store.namespace}",
        f"stored partitions: {lay.partitions}",
        f"configured partitions: {configured}",
    ]
    if lay.counts is not None:
        frm, to = lay.counts
        lines.append(
            f"migration: {frm} -> {to} in progress, started {lay.started} by {lay.by}, "
            f"{lay.moved} jobs and schedules moved; finish "
            f"it with `horae partitions migrate --to {to}`"
        )
        shown = all_tags(store.namespace, frm, to)
    else:
        lines.append("migration: none")
        shown = tags(store.namespace, lay.partitions)
    holder = await store.call("GET", store.lock_key)
    if holder:
        lines.append(f"migration lock: held by {holder}")
    for k in shown:
        lines.append(f"  {k.prefix} jobs: {await job_counts(store, k)}")
    return lines
