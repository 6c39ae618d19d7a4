"""`horae partitions migrate --to N`: move a stopped namespace to another partition count
(docs/how-to/scaling-out.md). Offline and resumable: the migration is recorded in `{ns}:meta` (every
process is refused meanwhile), and each job or schedule moves by copy-if-absent on its new
partition, then delete on its old one (copy_entry.lua, drop_entry.lua), so a run killed at any
point and run again leaves each exactly once. Nothing is kept in memory between runs: every
run walks every partition of both layouts and moves what is not where the new count puts it."""

from __future__ import annotations

import os
import socket
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scheduler.core.errors import MigrationRefused
from scheduler.core.keys import KeyName, Keys
from scheduler.core.procutil import pid_alive
from scheduler.core.timeutil import ms_to_utc, rfc3339
from scheduler.ops.migrate_store import MigrationStore
from scheduler.ops.migration_checks import problems, read_layout
from scheduler.ops.migration_plan import (
    Router,
    all_tags,
    flow_key,
    job_ops,
    job_sets,
    leftover_key,
    parse_flow,
    schedule_ops,
    tags,
)
from scheduler.store.partitions import topic_wide_limit
from scheduler.store.pipe import as_map
from scheduler.store.scripts import ScriptCode

POLICY_SLOTS = {
    "short": ("w",),
    "singleton": ("r",),
    "stately": ("w", "r", "t"),
    "exclusive": ("x",),
}  # _flow.lua
BATCH = 200


@dataclass
class Summary:
    """What a run did (or, dry, would do): moves per (from prefix, to prefix), and clashes."""

    jobs: Counter[tuple[str, str]] = field(default_factory=Counter)
    schedules: Counter[tuple[str, str]] = field(default_factory=Counter)
    conflicts: list[str] = field(default_factory=list)
    old: int = 0
    new: int = 0

    def lines(self, verb: str) -> list[str]:
        """One line per partition pair: "<verb> 12 jobs {ns}: -> {ns|3}:"."""
        out = [f"{verb} {n} jobs {src} -> {dst}" for (src, dst), n in sorted(self.jobs.items())]
        out += [
            f"{verb} {n} schedules {src} -> {dst}"
            for (src, dst), n in sorted(self.schedules.items())
        ]
        return out or [f"{verb} nothing"]


class Migration:
    """One run of the migration of `store`'s namespace to `new` partitions."""

    def __init__(
        self,
        store: MigrationStore,
        new: int,
        by: str,
        now_ms: Callable[[], int],
        say: Callable[[str], None],
        outbox_group: str,
        lock_ttl_ms: int = 10_000,
    ) -> None:
        self.store, self.new, self.by, self.now_ms, self.say = store, new, by, now_ms, say
        self.outbox_group, self.lock_ttl_ms = outbox_group, lock_ttl_ms
        self.ns = store.namespace

    async def run(self, dry_run: bool = False) -> Summary:
        """Check, record, move, clear and record the new count; `dry_run`: only say what would move.

        Raises:
            MigrationRefused: a precondition does not hold, another run holds the lock, another
                migration is in progress, or a job or schedule clashes with one of the same name.
        """
        lay = await read_layout(self.store)
        if lay.counts is not None and lay.counts[1] != self.new:
            raise MigrationRefused(
                f"namespace {self.ns!r}: a migration from partitions={lay.counts[0]} "
                f"to partitions={lay.counts[1]} is in progress (started "
                f"{lay.started} by {lay.by}); finish it first with "
                f"`horae partitions migrate --to {lay.counts[1]}`"
            )
        old = lay.counts[0] if lay.counts is not None else lay.partitions
        summary = Summary(old=old, new=self.new)
        if lay.counts is None and old == self.new:
            self.say(f"namespace {self.ns!r} has partitions={old} already: nothing to do")
            return summary
        if not dry_run:
            await self._lock()
        try:
            found = await problems(self.store, old, self.new, self.now_ms(), self.outbox_group)
            if dry_run:
                await self._walk(old, summary, dry=True)
                for line in found:
                    self.say("would refuse: " + line)
                return summary
            if found:
                raise MigrationRefused(
                    f"namespace {self.ns!r} cannot move from partitions={old} to "
                    f"partitions={self.new} now: " + "; ".join(found)
                )
            if lay.counts is None:
                await self.store.begin(old, self.new, _iso(self.now_ms()), self.by)
                self.say(
                    f"migration of {self.ns!r} from partitions={old} "
                    f"to partitions={self.new} recorded"
                )
            else:
                self.say(
                    f"resuming the migration of {self.ns!r} from "
                    f"partitions={old} to partitions={self.new}"
                )
            await self._counters(old)
            router = await self._walk(old, summary, dry=False)
            if summary.conflicts:
                raise MigrationRefused(
                    f"{len(summary.conflicts)} job(s) or schedule(s) exist under "
                    f"the same name on two partitions with different contents "
                    f"(left where they are): {', '.join(summary.conflicts[:10])}; "
                    "delete one of each and run the command again"
                )
            await self._sweep(old, router)
            await self._clear(old)
            await self.store.finish(self.new)
            self.say(f"namespace {self.ns!r} now has partitions={self.new}")
            return summary
        finally:
            if not dry_run:
                await self.store.unlock(self.by)

    async def _lock(self) -> None:
        """Take or keep the lock: one run at a time (a killed run's lock is taken over at once on
        its host, else when it expires)."""
        held = await self.store.lock(self.by, self.lock_ttl_ms, dead_here)
        if held is not None:
            raise MigrationRefused(
                f"namespace {self.ns!r}: another migration run ({held[0]}) holds the migration "
                f"lock for {held[1] / 1000:.1f} s more; let it finish, or run again once it expired"
            )

    # ------------------------------------------------------------------ steps
    async def _counters(self, old: int) -> None:
        """Each new partition's lease and FIFO counters at least every old one's, so no token or
        FIFO place repeats one of a job that moves there."""
        every, new_tags = all_tags(self.ns, old, self.new), tags(self.ns, self.new)
        for name in (KeyName.LEASE_SEQ, KeyName.FIFO_SEQ):
            values = dict(
                zip(
                    (k.prefix for k in every),
                    await self.store.many([("GET", k.prefix + name) for k in every]),
                )
            )
            top = max((int(v) for v in values.values() if v is not None), default=0)
            await self.store.many(
                [
                    ("SET", k.prefix + name, top)
                    for k in new_tags
                    if int(values[k.prefix] or 0) < top
                ]
            )

    async def _topics(self, old: int, dry: bool) -> Router:
        """Every topic's configuration on every new partition, with its home recomputed for the new
        count (dropped for 1); the router of the new layout."""
        every, new_tags = all_tags(self.ns, old, self.new), tags(self.ns, self.new)
        names = sorted(
            set().union(
                *[
                    set(m)
                    for m in await self.store.many([("SMEMBERS", k.topic_names) for k in every])
                ]
            )
        )
        configs: dict[str, dict[str, str]] = {}
        for name in names:
            for k, h in zip(every, await self.store.hashes([k.topic(name) for k in every])):
                if h:
                    configs[name] = h
                    break
        pinned = {n for n, c in configs.items() if topic_wide_limit(c)}
        router = Router(self.new, pinned)
        if not dry:
            commands: list[tuple[object, ...]] = []
            for name, cfg in configs.items():
                fields = {f: v for f, v in cfg.items() if f != "home"}
                home = router.home(name)
                if home is not None and self.new > 1:
                    fields["home"] = str(home)
                for k in new_tags:
                    commands += [
                        ("DEL", k.topic(name)),
                        ("HSET", k.topic(name), *[x for kv in fields.items() for x in kv]),
                        ("SADD", k.topic_names, name),
                    ]
            await self.store.many(commands)  # (DEL then HSET in one pipeline per node: in order)
            await self._known_topics(every, new_tags)
        return router

    async def _known_topics(self, every: Sequence[Keys], new_tags: Sequence[Keys]) -> None:
        """The topic memory (topic_memory.py) on every new partition: for each topic the latest
        "<ms>|<worker>|<app>" of any old one, so a known topic's jobs keep waiting for a worker."""
        latest: dict[str, str] = {}
        for memory in await self.store.hashes([k.known_topics for k in every]):
            for topic, mark in memory.items():
                if topic not in latest or int(mark.split("|", 1)[0]) > int(
                    latest[topic].split("|", 1)[0]
                ):
                    latest[topic] = mark
        if latest:
            await self.store.many(
                [
                    ("HSET", k.known_topics, *[x for kv in latest.items() for x in kv])
                    for k in new_tags
                ]
            )

    async def _walk(self, old: int, summary: Summary, dry: bool) -> Router:
        """Move (dry: count) every job and schedule not where the new count puts it; the router."""
        router = await self._topics(old, dry)
        new_tags = tags(self.ns, self.new)
        for tag in all_tags(self.ns, old, self.new):
            if not dry:
                await self._lock()
            keys = await self.store.scan(tag)
            names = [s[5:] for s in keys if s.startswith("cron:")]
            await self._schedules(
                tag, names, router=router, new_tags=new_tags, summary=summary, dry=dry
            )
            windowed: dict[str, str] = {}
            dd = [
                (s, f)
                for s in keys
                if (f := parse_flow(s)) is not None and f.kind == KeyName.FLOW_DEDUPE
            ]
            for (s, f), holder in zip(
                dd, await self.store.many([("GET", tag.prefix + s) for s, _ in dd])
            ):
                if holder is not None:
                    windowed[holder] = (
                        f.key
                    )  # (a dedupe key held by the job: routes it like its key)
            ids = sorted(s[2:] for s in keys if s.startswith("j:"))
            for i in range(0, len(ids), BATCH):
                await self._jobs(
                    tag,
                    ids[i : i + BATCH],
                    windowed,
                    router=router,
                    new_tags=new_tags,
                    summary=summary,
                    dry=dry,
                )
        return router

    async def _schedules(
        self,
        tag: Keys,
        names: Sequence[str],
        router: Router,
        new_tags: Sequence[Keys],
        summary: Summary,
        dry: bool,
    ) -> None:
        for name, h in zip(names, await self.store.hashes([tag.cron(n) for n in names])):
            target = new_tags[router.schedule(name, h.get("topic", ""))]
            if not h or target.prefix == tag.prefix:
                continue
            summary.schedules[(tag.prefix, target.prefix)] += 1
            if dry:
                continue
            score, declared = await self.store.many(
                [("ZSCORE", tag.crons_due, name), ("SISMEMBER", tag.crons_declared, name)]
            )
            copy, drop = schedule_ops(
                tag, target, name, None if score is None else str(score), bool(int(declared))
            )
            there = target.cron(name)
            code = await self.store.copy(
                there, target.counts, payload=there, logs=there, fields=h, ops=copy
            )
            if code == ScriptCode.CONFLICT:
                summary.conflicts.append(f"schedule {name!r} ({tag.prefix} and {target.prefix})")
                continue
            here = tag.cron(name)
            await self.store.drop(here, tag.counts, payload=here, logs=here, ops=drop)
            await self.store.count_moved(1)

    async def _jobs(
        self,
        tag: Keys,
        ids: Sequence[str],
        windowed: dict[str, str],
        router: Router,
        new_tags: Sequence[Keys],
        summary: Summary,
        dry: bool,
    ) -> None:
        movers = []
        for job_id, h in zip(ids, await self.store.hashes([tag.job(i) for i in ids])):
            if not h:
                continue
            target = new_tags[
                router.job(job_id, h, "" if h.get("dd") else windowed.get(job_id, ""))
            ]
            if target.prefix != tag.prefix:
                movers.append((job_id, h, target))
                summary.jobs[(tag.prefix, target.prefix)] += 1
        if dry or not movers:
            return
        reads: list[tuple[object, ...]] = []
        plans = []
        for job_id, h, target in movers:
            sets = job_sets(tag, job_id, h)
            topic, key, pol = h.get("topic", ""), h.get("key", ""), h.get("pol", "")
            ks = flow_key(tag, KeyName.FLOW_SLOTS, topic, key) if pol in POLICY_SLOTS else None
            dedupe = h.get("dd") or windowed.get(job_id)
            dd = flow_key(tag, KeyName.FLOW_DEDUPE, topic, dedupe) if dedupe else None
            start = len(reads)
            reads += [("ZSCORE", s, job_id) for s in sets]
            reads += [("GET", tag.payload(job_id)), ("LRANGE", tag.logs(job_id), 0, -1)]
            reads += [("HGETALL", ks)] if ks else []
            reads += [("GET", dd), ("PTTL", dd)] if dd else []
            plans.append((job_id, h, target, sets, ks, dd, start))
        replies = await self.store.many(reads)
        moved = 0
        for job_id, h, target, sets, ks, dd, start in plans:
            r = replies[start:]
            scores = {s: str(v) for s, v in zip(sets, r) if v is not None}
            payload, lines, rest = r[len(sets)], r[len(sets) + 1], r[len(sets) + 2 :]
            marks: list[tuple[str, str, str]] = []
            if ks:
                marks += [
                    ("h", ks, slot) for slot, holder in as_map(rest[0]).items() if holder == job_id
                ]
                rest = rest[1:]
            if dd and rest[0] == job_id:
                marks.append(("x", dd, str(rest[1]) if int(rest[1]) > 0 else ""))
            copy, drop = job_ops(tag, target, job_id, fields=h, scores=scores, marks=marks)
            count = f"{h.get('topic', '')}|{h.get('state', '')}"
            code = await self.store.copy(
                target.job(job_id),
                target.counts,
                payload=target.payload(job_id),
                logs=target.logs(job_id),
                fields=h,
                ops=copy,
                count=count,
                big_payload=payload,
                lines=lines or (),
            )
            if code == ScriptCode.CONFLICT:
                summary.conflicts.append(f"job {job_id!r} ({tag.prefix} and {target.prefix})")
                continue
            await self.store.drop(
                tag.job(job_id),
                tag.counts,
                payload=tag.payload(job_id),
                logs=tag.logs(job_id),
                ops=drop,
                count=count,
            )
            moved += 1
        await self.store.count_moved(moved)
        await self._lock()
        self.say(f"moved {moved} jobs from {tag.prefix}")

    async def _sweep(self, old: int, router: Router) -> None:
        """Per-key structures no single job holds: a rate limit's state and a FIFO key's blocked
        mark go where the key's jobs went; marks of jobs that left (copied with them) are
        removed."""
        new_tags = tags(self.ns, self.new)
        for tag in all_tags(self.ns, old, self.new):
            await self._lock()
            for suffix in await self.store.scan(tag):
                key, f = tag.prefix + suffix, parse_flow(suffix)
                if f is not None and f.kind == KeyName.FLOW_RATE:
                    target = new_tags[router.flow(f.topic, f.key)]
                    if target.prefix != tag.prefix:
                        await self._merge_rate(key, target.prefix + suffix)
                elif f is not None or suffix.startswith(KeyName.PARKED):
                    await self._drop_departed(
                        tag,
                        key,
                        "ZRANGE"
                        if f is None or f.kind == KeyName.FLOW_FIFO
                        else "HGETALL"
                        if f.kind == KeyName.FLOW_SLOTS
                        else "GET",
                    )
                elif suffix.startswith("fifo_blocked:"):
                    topic = suffix[len("fifo_blocked:") :]
                    for member in await self.store.call("SMEMBERS", key):
                        target = new_tags[router.flow(topic, member)]
                        if target.prefix != tag.prefix:
                            await self.store.many(
                                [
                                    ("SADD", target.fifo_blocked(topic), member),
                                    ("SREM", key, member),
                                ]
                            )

    async def _merge_rate(self, key: str, there: str) -> None:
        """A rate limit's state (a GCRA arrival time) onto its new partition: the later one wins."""
        value, ttl, current = await self.store.many([("GET", key), ("PTTL", key), ("GET", there)])
        if value is not None and (current is None or float(current) < float(value)):
            await self.store.call("SET", there, value, *(("PX", int(ttl)) if int(ttl) > 0 else ()))
        await self.store.call("DEL", key)

    async def _drop_departed(self, tag: Keys, key: str, read: str) -> None:
        """Remove from a flow mark the jobs no longer on `tag` (a FIFO place, a parked job, a
        policy slot, a dedupe key): their copies went with them."""
        reply = await self.store.call(read, key, *((0, -1) if read == "ZRANGE" else ()))
        holders = (
            list(as_map(reply).items())
            if read == "HGETALL"
            else [(m, m) for m in reply]
            if read == "ZRANGE"
            else [("", reply)]
            if reply is not None
            else []
        )
        here = await self.store.many([("EXISTS", tag.job(h)) for _, h in holders])
        for (field_, holder), exists in zip(holders, here):
            if int(exists):
                continue
            if read == "ZRANGE":
                await self.store.call("ZREM", key, holder)
            elif read == "HGETALL":
                await self.store.call("HDEL", key, field_)
            else:
                await self.store.call("DEL", key)

    async def _clear(self, old: int) -> None:
        """Clear the partitions the new layout no longer has (their jobs and schedules left)."""
        kept = {k.prefix for k in tags(self.ns, self.new)}
        for tag in tags(self.ns, old):
            if tag.prefix in kept:
                continue
            keys = await self.store.scan(tag)
            left = [s for s in keys if s.startswith(("j:", "cron:"))]
            if left:
                raise MigrationRefused(
                    f"partition {tag.prefix} still holds {len(left)} jobs or schedules "
                    f"(e.g. {left[0]!r}); run the command again"
                )
            await self.store.delete([tag.prefix + s for s in keys if leftover_key(s)])


def run_by() -> str:
    """Who runs the migration, as recorded: host and pid (dead_here reads it back)."""
    return f"{socket.gethostname()} pid {os.getpid()}"


def dead_here(holder: str) -> bool:
    """Whether a lock holder (run_by) is a process of this host that no longer runs."""
    host, _, pid = holder.rpartition(" pid ")
    return host == socket.gethostname() and pid.isdigit() and not pid_alive(int(pid))


def _iso(ms: int) -> str:
    """When a migration started, as `horae partitions status` shows it (the one instant format)."""
    return rfc3339(ms_to_utc(ms)) or ""
