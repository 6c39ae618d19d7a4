"""Schedules declared beside listeners (`@on_event(topic, cron=...)` / `every=`), kept by
the workers that serve their topics: at start a worker upserts the declarations of the
topics it serves, then removes the declared schedules it owns that its code no longer
declares.

Ownership: a worker owns a stored schedule when it is flagged `declared` (written only
from a declaration, never by schedule_cron; its name is in `{ns}:crons_declared`, so a
start reads the declared schedules, not all of them) and its topic is one this worker
serves (has listeners for and claims). A schedule_cron schedule, and a declared schedule of a
topic the worker does not serve, are never removed by it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from listeners import ListenerRegistry
from scheduler.core.errors import ConfigError, ScheduleError
from scheduler.facade.crons import CronSchedules, Planned
from scheduler.store.redis import RedisStore
from scheduler.store.scripts import ScriptCode, UpsertCode

log = logging.getLogger("horae.cron")


@dataclass(frozen=True)
class DeclaredSync:
    """What a worker's start did to the declared schedules, by name."""

    created: tuple[str, ...] = ()
    rescheduled: tuple[str, ...] = ()  # the trigger changed: next tick recomputed
    unchanged: tuple[str, ...] = ()  # same trigger: next tick kept (other fields rewritten)
    removed: tuple[str, ...] = ()


async def sync_declared(
    crons: CronSchedules, store: RedisStore, registry: ListenerRegistry, topics: Sequence[str]
) -> DeclaredSync:
    """Make the stored declared schedules of `topics` what `registry` declares.

    Every declaration is checked before anything is written; the upserts are idempotent
    (workers starting together create each schedule once, and an unchanged trigger keeps
    its next tick), and a removal only deletes a schedule still declared and of the topic
    it was read with.

    Args:
        topics: the topics this worker serves (ClaimFilter.listened).

    Raises:
        ConfigError: a declaration refused by the scheduler's checks (the tick's payload by
            the topic's schema, say), or naming a schedule created with schedule_cron.
    """
    served = set(topics)
    plans: list[Planned] = []
    for decl in registry.declarations(served):
        try:
            plans.append(crons.plan_declared(decl))
        except ScheduleError as exc:
            raise ConfigError(
                f"schedule {decl.name!r} declared beside the listeners of topic {decl.topic!r}: "
                f"{exc}"
            ) from exc
    stored = await store.declared_crons()  # name -> topic
    taken = sorted(await store.existing_crons([p.name for p in plans if p.name not in stored]))
    if taken:  # schedule_cron's: refused before anything is written
        raise _taken(taken[0])
    created: list[str] = []
    rescheduled: list[str] = []
    unchanged: list[str] = []
    for plan in plans:
        code = await crons.upsert(plan, declared=True)
        if code == ScriptCode.OTHER_ORIGIN:  # created by schedule_cron since we read
            raise _taken(plan.name)
        (
            created
            if code == UpsertCode.CREATED
            else rescheduled
            if code == UpsertCode.RESCHEDULED
            else unchanged
        ).append(plan.name)
    declared_anywhere = {d.name for d in registry.declarations()}
    removed: list[str] = []
    for name, topic in stored.items():
        if topic in served and name not in declared_anywhere:
            if await store.remove_cron(name, declared_topic=topic):
                removed.append(name)
    result = DeclaredSync(tuple(created), tuple(rescheduled), tuple(unchanged), tuple(removed))
    if created or rescheduled or removed:
        log.info(
            "declared schedules: created %s, rescheduled %s, removed %s",
            created,
            rescheduled,
            removed,
            extra={"event": "declared_crons_synced"},
        )
    return result


def _taken(name: str) -> ConfigError:
    return ConfigError(
        f"schedule {name!r} is declared beside a listener, but a schedule of that name was "
        "created with schedule_cron: give the declaration another name= (or delete the other "
        f"with `horae cron delete {name}`)"
    )
