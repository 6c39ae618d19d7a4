"""Cron schedules in Redis: upsert, due reads, firing (tick jobs), pause, removal
and listing. A schedule lives on its name's partition, or on its topic's home partition when
the topic is pinned (a topic-wide limit), so its ticks are counted there."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from redis.exceptions import RedisError

from scheduler.core.job import CronFire, CronInfo, NewCron
from scheduler.core.keys import Keys
from scheduler.core.timeutil import ms_to_utc
from scheduler.store.base import StoreBase
from scheduler.store.pipe import as_map


class CronStore(StoreBase):
    """The schedules of one namespace."""

    # ------------------------------------------------------------------ cron
    async def upsert_cron(self, cron: NewCron, now_ms: int) -> int:
        """Create or update a schedule: UpsertCode (1 created, 2 rescheduled, 0 updated in
        place) or ScriptCode.OTHER_ORIGIN (-12: the name is a schedule of the other origin).
        An existing schedule stays on its partition; a new one goes to its name's, or to its
        topic's home when the topic is pinned."""
        job = cron.job
        k = await self._cron_keys(cron.name)
        if k is None:
            k = self._name_keys(cron.name)
            topic = self.parts[0].topic(job.topic)  # (every partition holds its configuration)
            home = await self._call(f"read of topic {job.topic}", "HGET", topic, "home") or ""
            if home.isdigit() and int(home) < self.count:
                k = self.parts[int(home)]
        return int(
            await self._run(
                "upsert_cron",
                [k.cron(cron.name), k.crons_due, k.cron_names, k.wake, k.crons_declared],
                [
                    cron.name,
                    now_ms,
                    cron.expr,
                    job.tz,
                    job.topic,
                    job.payload_json,
                    job.metadata_json,
                    job.max_attempts,
                    job.backoff_type,
                    job.backoff_delay_ms,
                    job.timeout_ms,
                    cron.misfire,
                    cron.next_ms,
                    cron.trace,
                    job.backoff_max_delay_ms,
                    job.backoff_jitter,
                    job.key,
                    job.priority,
                    job.dedupe_key,
                    job.dedupe_window_ms,
                    cron.every_ms or "",
                    cron.jitter_ms or "",
                    "1" if cron.declared else "0",
                ],
            )
        )

    async def due_crons(self, now_ms: int, limit: int) -> list[dict[str, str]]:
        """Schedules whose next fire is due, with their fields (O(due), not O(all)); of one
        partition (the worker's loop)."""
        k = self.single
        try:
            names = await self.wire.call(
                "ZRANGEBYSCORE", k.crons_due, "-inf", now_ms, "LIMIT", 0, limit
            )
            rows = await self._cron_rows(k, names)
        except RedisError as exc:
            raise self.storage_error("read of due crons", exc) from exc
        return rows

    async def _cron_rows(self, k: Keys, names: Sequence[str]) -> list[dict[str, str]]:
        try:
            flats = await self.wire.call_many([("HGETALL", k.cron(n)) for n in names])
        except RedisError as exc:
            raise self.storage_error("read of crons", exc) from exc
        out = []
        for name, flat in zip(names, flats):
            if flat:
                out.append({**as_map(flat), "name": name})
        return out

    async def fire_crons(self, fires: Sequence[CronFire], now_ms: int) -> list[int]:
        """Create the tick jobs and advance the schedules; per schedule: jobs created or STALE."""
        if not fires:
            return []
        k = self.single
        args: list[Any] = [now_ms, k.cron_prefix, k.job_prefix]
        for f in fires:
            args += [f.name, f.expected_next_ms, f.new_next_ms, len(f.ticks)]
            for tick, job_id, trace in f.ticks:
                args += [tick, job_id, trace]
        return [
            int(c)
            for c in await self._run(
                "fire_crons", [k.crons_due, k.due, k.outbox, k.counts, k.wake], args
            )
        ]

    async def set_cron_paused(self, name: str, paused: bool, next_ms: int, now_ms: int) -> int:
        """Pause or resume; 1 changed, 0 unchanged, ScriptCode.NOT_FOUND."""
        k = await self._cron_keys(name) or self._name_keys(name)
        return int(
            await self._run(
                "set_cron_paused",
                [k.cron(name), k.crons_due, k.wake],
                [name, "1" if paused else "0", next_ms, now_ms],
            )
        )

    async def remove_cron(self, name: str, declared_topic: str = "") -> bool:
        """Delete a schedule; False when there was none. With `declared_topic`, only a declared
        schedule of that topic (a worker removing one gone from its code)."""
        k = await self._cron_keys(name) or self._name_keys(name)
        deleted = int(
            await self._run(
                "remove_cron",
                [k.cron(name), k.crons_due, k.cron_names, k.crons_declared],
                [name, declared_topic],
            )
        )
        return deleted > 0  # remove_cron.lua replies with the number of schedules deleted

    async def get_cron(self, name: str) -> CronInfo | None:
        """One schedule, or None."""
        k = await self._cron_keys(name) or self._name_keys(name)
        rows = await self._cron_rows(k, [name])
        return _cron_info(rows[0]) if rows else None

    async def declared_crons(self) -> dict[str, str]:
        """The schedules declared beside listeners: name -> topic (O(declared), not O(all))."""
        merged: dict[str, str] = {}
        for names in await self._each(self._declared_crons_in):
            merged.update(names)
        return merged

    async def _declared_crons_in(self, k: Keys) -> dict[str, str]:
        try:
            names = sorted(await self.wire.call("SMEMBERS", k.crons_declared))
            topics = await self.wire.call_many([("HGET", k.cron(n), "topic") for n in names])
        except RedisError as exc:
            raise self.storage_error("read of declared crons", exc) from exc
        return {n: t for n, t in zip(names, topics) if t is not None}

    async def existing_crons(self, names: Sequence[str]) -> set[str]:
        """Which of `names` are stored schedules."""
        return set().union(*await self._each(lambda k: self._existing_crons_in(k, names)))

    async def _existing_crons_in(self, k: Keys, names: Sequence[str]) -> set[str]:
        try:
            found = await self.wire.call_many([("EXISTS", k.cron(n)) for n in names])
        except RedisError as exc:
            raise self.storage_error("read of crons", exc) from exc
        return {n for n, f in zip(names, found) if int(f)}

    async def list_crons(self) -> list[CronInfo]:
        """Every schedule, by name."""
        rows = await self._each(self._list_crons_in)
        return sorted((c for part in rows for c in part), key=lambda c: c.name)

    async def _list_crons_in(self, k: Keys) -> list[CronInfo]:
        try:
            names = sorted(await self.wire.call("SMEMBERS", k.cron_names))
            rows = await self._cron_rows(k, names)
        except RedisError as exc:
            raise self.storage_error("read of crons", exc) from exc
        return [_cron_info(r) for r in rows]


def _cron_info(f: dict[str, str]) -> CronInfo:
    paused = f.get("paused") == "1"
    return CronInfo(
        name=f["name"],
        cron=f["expr"],
        tz=f["tz"],
        topic=f["topic"],
        next_run_at=None if paused else ms_to_utc(int(f["next"])),
        paused=paused,
        last_run_at=ms_to_utc(int(f["last_run"])) if f.get("last_run") else None,
        misfire=f["misfire"],
        payload=json.loads(f["payload"]),
        metadata=json.loads(f["meta"]),
        max_attempts=int(f["max"]),
        every=timedelta(milliseconds=int(f["every"])) if f.get("every") else None,
        jitter=timedelta(milliseconds=int(f["jit"])) if f.get("jit") else None,
        declared=f.get("declared") == "1",
    )
