"""Operator actions, shared by the pages and the API: each checks the caller's role, runs
one Scheduler operation as the caller (the job's own events carry the actor) and appends
the action and its outcome to the audit's action log (migration 0008), refusals included."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from console.auth import Principal
from console.data import audit_of
from scheduler.api import Scheduler
from scheduler.core.errors import DeadLetterNotFound, InvalidCron, StorageError
from scheduler.core.job import JobInfo

log = logging.getLogger("horae.console")

JOB_ACTIONS = ("cancel", "retry", "reschedule", "delete")
DEAD_LETTER_ACTIONS = ("replay", "delete")
CRON_ACTIONS = ("pause", "resume", "trigger")
# The states each job action applies to: the engine's rules (scheduler/facade/operations.py and its
# scripts cancel.lua, retry_job.lua, reschedule_job.lua, delete_job.lua), the one table behind
# the job page's buttons and the API's 409. Beyond the state: a cancelled job whose attempt is
# still in flight can be neither retried nor deleted, and a dead letter is never rescheduled.
ALLOWED_STATES: dict[str, tuple[str, ...]] = {
    "cancel": ("scheduled", "waiting_for_parents", "retrying", "running"),
    "retry": ("failed", "cancelled"),
    "reschedule": ("scheduled", "retrying"),
    "delete": (
        "scheduled",
        "waiting_for_parents",
        "retrying",
        "completed",
        "failed",
        "cancelled",
    ),
}


@dataclass(frozen=True)
class Outcome:
    """What an action did: `outcome` done, not_found (no such job), conflict (the job's state
    does not allow it) or refused, a sentence for people, and the new job's id of a replay or
    a trigger."""

    outcome: str
    message: str
    job_id: str | None = None

    @property
    def done(self) -> bool:
        return self.outcome == "done"


def in_flight(job: JobInfo) -> bool:
    """A job cancelled while its attempt runs: cancelled, not finished until the attempt settles."""
    return job.state.value == "cancelled" and job.finished_at is None


def is_dead_letter(job: JobInfo) -> bool:
    """A dead letter (it waits in its dead-letter set, never in the due set)."""
    return "source_job_id" in job.metadata and "source_topic" in job.metadata


def allowed(action: str, job: JobInfo) -> bool:
    """Whether the engine would take `action` on `job` as it is now (ALLOWED_STATES)."""
    if job.state.value not in ALLOWED_STATES.get(action, ()):
        return False
    if action in ("retry", "delete") and in_flight(job):
        return False
    return not (action == "reschedule" and is_dead_letter(job))


def allowed_actions(job: JobInfo | None) -> tuple[str, ...]:
    """The job actions `job`'s state allows, in JOB_ACTIONS order (none once Redis lost it)."""
    return tuple(a for a in JOB_ACTIONS if job is not None and allowed(a, job))


def conflict_message(action: str, job: JobInfo) -> str:
    """Why the engine refused `action` on an existing job: its state, and what the action needs."""
    why = f"job {job.id} is {job.state.value}"
    if action in ("retry", "delete") and in_flight(job):
        why += " with an attempt still in flight (wait for it to finish)"
    elif action == "reschedule" and is_dead_letter(job):
        why += " as a dead letter (replay it instead)"
    return f"{action}: {why}; {action} applies to {' or '.join(ALLOWED_STATES[action])} jobs"


class Refused(Exception):
    """A viewer tried to act (HTTP 403)."""


async def record(
    scheduler: Scheduler,
    who: Principal,
    action: str,
    target: str,
    outcome: str,
    detail: dict[str, Any] | None = None,
) -> None:
    """Append to the action log; a log line instead when the audit is off or down (the
    action itself already happened, or was refused)."""
    audit = audit_of(scheduler)
    if audit is not None:
        try:
            await audit.record_action(
                who.name, who.role.value, action, target, outcome=outcome, detail=detail
            )
            return
        except (StorageError, OSError, TimeoutError) as exc:
            log.warning("console: action not recorded in the audit (%s)", exc)
    log.info(
        "console action %s %s by %s: %s",
        action,
        target,
        who.actor,
        outcome,
        extra={"event": "console.action", "actor": who.actor, "action": action, "target": target},
    )


async def _guard(scheduler: Scheduler, who: Principal, action: str, target: str) -> None:
    if not who.can_act:
        await record(
            scheduler, who, action, target, outcome="refused", detail={"role": who.role.value}
        )
        raise Refused(f"{who.name} is a {who.role.value}: only operators may {action}")


async def job_action(
    scheduler: Scheduler,
    who: Principal,
    action: str,
    job_id: str,
    run_at: datetime | None = None,
    tz: str = "UTC",
) -> Outcome:
    """cancel, retry, reschedule (to `run_at` in `tz`) or delete one job.

    Raises:
        Refused: the caller is a viewer. ScheduleError: a bad run_at or tz (nothing done).
    """
    await _guard(scheduler, who, action, job_id)
    actor = who.actor
    if action == "cancel":
        ok = await scheduler.cancel(job_id, actor=actor)
    elif action == "retry":
        ok = await scheduler.retry(job_id, actor=actor)
    elif action == "reschedule":
        if run_at is None:
            raise ValueError("reschedule needs run_at")
        ok = await scheduler.reschedule(job_id, run_at, tz, actor=actor)
    elif action == "delete":
        ok = await scheduler.delete(job_id, actor=actor)
    else:
        raise ValueError(f"unknown job action {action!r}; allowed: {', '.join(JOB_ACTIONS)}")
    outcome = (
        Outcome("done", f"{action}: done") if ok else await _why_not(scheduler, action, job_id)
    )
    detail = {"run_at": run_at.isoformat(), "tz": tz} if action == "reschedule" and run_at else None
    await record(scheduler, who, action, job_id, outcome=outcome.outcome, detail=detail)
    return outcome


async def _why_not(scheduler: Scheduler, action: str, job_id: str) -> Outcome:
    """The outcome of a job action the engine refused: the job is gone, or its state (read after
    the refusal) does not allow it."""
    job = await scheduler.get_job(job_id)
    if job is None:
        return Outcome("not_found", f"{action}: no job {job_id!r} in Redis")
    return Outcome("conflict", conflict_message(action, job))


async def dead_letter_action(
    scheduler: Scheduler, who: Principal, action: str, job_id: str
) -> Outcome:
    """replay or delete one dead letter.

    Raises:
        Refused: the caller is a viewer.
    """
    await _guard(scheduler, who, f"dead_letter.{action}", job_id)
    if action == "replay":
        try:
            new_id = await scheduler.replay(job_id, actor=who.actor)
            outcome = Outcome("done", f"replayed as job {new_id}", new_id)
        except DeadLetterNotFound:
            outcome = Outcome(
                "not_found", f"no dead letter {job_id} (replayed or deleted meanwhile?)"
            )
    elif action == "delete":  # (a job that is no dead letter is not one to delete here)
        held = await scheduler.store.held_dead_letter_topic(job_id)
        ok = held is not None and await scheduler.delete(job_id, actor=who.actor)
        outcome = (
            Outcome("done", "deleted") if ok else Outcome("not_found", f"no dead letter {job_id}")
        )
    else:
        raise ValueError(
            f"unknown dead-letter action {action!r}; allowed: {', '.join(DEAD_LETTER_ACTIONS)}"
        )
    await record(
        scheduler,
        who,
        f"dead_letter.{action}",
        job_id,
        outcome=outcome.outcome,
        detail={"job_id": outcome.job_id} if outcome.job_id else None,
    )
    return outcome


async def cron_action(scheduler: Scheduler, who: Principal, action: str, name: str) -> Outcome:
    """pause, resume or trigger (run one tick now, outside its timetable) a schedule.

    A triggered tick is an ordinary job of the schedule's topic with its payload, metadata
    (plus `triggered_by` and `cron`) and attempts, keyed by the schedule's name so the
    topic's policy treats it like a tick.

    Raises:
        Refused: the caller is a viewer.
    """
    await _guard(scheduler, who, f"cron.{action}", name)
    new_id = None
    already = False
    if action in ("pause", "resume"):
        try:
            changed = await (
                scheduler.pause_cron(name) if action == "pause" else scheduler.resume_cron(name)
            )
        except InvalidCron:  # no schedule of that name (removed meanwhile?): like an unknown job
            ok = False
        else:
            ok, already = True, not changed
    elif action == "trigger":
        info = await scheduler.get_cron(name)
        ok = info is not None
        if info is not None:
            meta = {**dict(info.metadata), "cron": name, "triggered_by": who.actor}
            new_id = await scheduler.schedule_at(
                info.topic,
                datetime.now(UTC),
                info.tz,
                payload=info.payload,
                metadata=meta,
                retry={"attempts": info.max_attempts},
                key=name,
            )
    else:
        raise ValueError(f"unknown schedule action {action!r}; allowed: {', '.join(CRON_ACTIONS)}")
    if not ok:
        outcome = Outcome("not_found", f"no schedule named {name!r}")
    elif already:
        outcome = Outcome("done", f"{action}: done (it already was {action}d)")
    else:
        outcome = Outcome(
            "done", f"{action}: done" + (f" (job {new_id})" if new_id else ""), new_id
        )
    await record(
        scheduler,
        who,
        f"cron.{action}",
        name,
        outcome=outcome.outcome,
        detail={"job_id": new_id} if new_id else None,
    )
    return outcome


async def drain_worker(scheduler: Scheduler, who: Principal, worker_id: str) -> Outcome:
    """Ask one live worker to drain and exit (Scheduler.drain_worker): it stops claiming at its next
    heartbeat, its attempts finish within its grace, then it exits.

    Raises:
        Refused: the caller is a viewer. ScheduleError: a worker id that is no string (nothing
            done).
    """
    await _guard(scheduler, who, "worker.drain", worker_id)
    if await scheduler.drain_worker(worker_id):
        outcome = Outcome(
            "done",
            f"drain requested: worker {worker_id} stops claiming at its next heartbeat, "
            "then exits once its running attempts finished",
        )
    else:
        outcome = Outcome(
            "not_found", f"no live worker {worker_id!r} (it stopped, or never ran here)"
        )
    await record(scheduler, who, "worker.drain", worker_id, outcome.outcome)
    return outcome


async def purge_dead_letters(scheduler: Scheduler, who: Principal, topic: str) -> Outcome:
    """Remove every dead letter held on `topic` (bulk; the page asks for confirmation)."""
    await _guard(scheduler, who, "dead_letter.purge", topic)
    n = await scheduler.purge_dead_letters(topic, actor=who.actor)
    await record(scheduler, who, "dead_letter.purge", topic, outcome="done", detail={"removed": n})
    return Outcome("done", f"removed {n} dead letters")


async def replay_all(
    scheduler: Scheduler, who: Principal, topic: str, limit: int = 1000
) -> Outcome:
    """Replay up to `limit` dead letters of `topic`, oldest first (bulk)."""
    await _guard(scheduler, who, "dead_letter.replay_all", topic)
    page = await scheduler.dead_letters(topic, limit=min(limit, 1000))
    replayed = 0
    for item in page.items:
        try:
            await scheduler.replay(item.id, actor=who.actor)
            replayed += 1
        except DeadLetterNotFound:
            continue  # replayed or deleted by someone else meanwhile
    await record(
        scheduler,
        who,
        "dead_letter.replay_all",
        topic,
        outcome="done",
        detail={"replayed": replayed},
    )
    return Outcome("done", f"replayed {replayed} dead letters")
