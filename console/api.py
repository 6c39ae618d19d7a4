"""The JSON API under /api/v1 (OpenAPI at /api/v1/openapi.json): schedule a job with one
HTTP call from any language, look at and act on jobs, schedules and topics. Errors are
{"error": {"code", "message", "field"}}; actions need the operator role and a JSON body."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, HTTPException, Query, Request

from console import actions, data
from console.api_charts import ChartsOut
from console.api_flows import FlowNodeOut, not_a_root
from console.api_input import (
    ACTION_BODY,
    MAX_DELAY_S,
    ActionIn,
    CursorQuery,
    FieldInvalid,
    IdPrefixQuery,
    Instant,
    KeyQuery,
    NoBody,
    PayloadQuery,
    RescheduleIn,
    ScheduleIn,
    StateQuery,
    TopicQuery,
)
from console.api_output import (
    ERRORS,
    ActionOut,
    AttemptOut,
    CronOut,
    CronPageOut,
    DeadLetterTopicOut,
    DeadLetterTopicPageOut,
    JobDetailOut,
    JobOut,
    JobPageOut,
    ScheduledOut,
    SpanOut,
    StatsOut,
    TopicOut,
    TopicPageOut,
    WorkerOut,
    WorkerPageOut,
)
from console.auth import Principal
from console.deps import GuardedRoute, acts, caller, console_of
from console.topic_detail import held_back
from console.trends import Range, read_trends
from scheduler.core.errors import InvalidDelay
from scheduler.core.timeutil import ms_to_utc, parse_duration
from scheduler.core.topic_options import TopicOptions
from scheduler.core.validation import MAX_TOPIC_LEN
from scheduler.facade.listing import every_topic
from scheduler.store.listing import check_state
from scheduler.store.reads import COUNT_KEYS

router = APIRouter(prefix="/api/v1", tags=["horae"], route_class=GuardedRoute)
Who = Annotated[Principal, Depends(caller)]
MAX_TICKS = 100  # a schedule's history in one answer


def _action(outcome: actions.Outcome) -> ActionOut:
    """A done action's answer; an unknown id is a 404, a state that does not allow it a 409."""
    if outcome.outcome == "not_found":
        raise HTTPException(404, outcome.message)
    if outcome.outcome == "conflict":
        raise HTTPException(409, outcome.message)
    return ActionOut(outcome=outcome.outcome, message=outcome.message, job_id=outcome.job_id)


def _one_of(job: ScheduleIn, *names: str) -> None:
    """At most one of `names` given (not null)."""
    given = [n for n in names if getattr(job, n) is not None]
    if len(given) > 1:
        raise FieldInvalid(given[-1], f"give {' or '.join(given)}, not both")


def _delay_s(job: ScheduleIn) -> float:
    """The delay in seconds (text checked by the engine's grammar and bounded like delay_s)."""
    if job.delay is None:
        return job.delay_s or 0
    seconds = parse_duration(job.delay, "delay")
    if seconds > MAX_DELAY_S:
        raise InvalidDelay(
            f"delay must be at most {MAX_DELAY_S // 86_400} days; got {job.delay!r}", field="delay"
        )
    return seconds


# -------------------------------------------------------------------------------- jobs
@router.post("/jobs", status_code=201, response_model=ScheduledOut, responses=ERRORS)
@acts(lambda p: ("schedule", "(body not read)"))
async def schedule_job(
    request: Request, who: Who, job: Annotated[ScheduleIn, Body()]
) -> ScheduledOut:
    """Schedule one job (operators only). `created` false: nothing was stored, `job_id` is
    the job holding the slot (a duplicate id, a dedupe or the topic's policy: `reason`)."""
    if not who.can_act:  # (GuardedRoute refused it before reading the body)
        raise actions.Refused(f"{who.name} is a {who.role.value}: only operators may schedule")
    s = console_of(request).scheduler
    _one_of(job, "run_at", "delay", "delay_s")
    _one_of(job, "timeout", "timeout_s")
    from datetime import UTC

    when = (
        job.run_at
        if job.run_at is not None
        else datetime.now(UTC) + timedelta(seconds=_delay_s(job))
    )
    meta = {**(job.metadata or {}), "scheduled_by": who.actor}
    timeout = (
        job.timeout if job.timeout is not None else job.timeout_s
    )  # (text: the engine's grammar and bounds)
    result = await s.schedule(
        job.topic,
        when,
        job.tz,
        payload=job.payload,
        metadata=meta,
        retry={"attempts": job.attempts} if job.attempts else None,
        timeout=timeout,
        key=job.key,
        priority=job.priority,
        job_id=job.job_id,
        after=job.after,
        on_parent_failure=job.on_parent_failure,
    )
    return ScheduledOut(job_id=result.job_id, created=result.created, reason=result.reason)


@router.get("/jobs", response_model=JobPageOut, responses=ERRORS)
async def list_jobs(
    request: Request,
    who: Who,
    topic: TopicQuery = None,
    state: StateQuery = None,
    key: KeyQuery = None,
    since: Instant | None = None,
    until: Instant | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: CursorQuery = None,
    id_prefix: IdPrefixQuery = None,
    payload: PayloadQuery = None,
) -> JobPageOut:
    """A page of jobs held in Redis; pass `cursor` back for the next one (null: the last).

    `id_prefix`: the jobs whose id starts with it instead, from the audit trail's index of
    every job (so also those past Redis's retention: `in_redis` false), by id; `topic`, `state`,
    `key` and `payload` filter them, `since` and `until` do not apply. `payload` (`field=value`,
    nested fields joined by dots: `order.status=paid`) keeps the jobs of the page whose payload
    holds that value: bounded, it filters the page examined, so a page may hold fewer than
    `limit` jobs (or none) and still have a `cursor`."""
    s = console_of(request).scheduler
    check_state(state)
    match = data.PayloadMatch.parse(payload or "")
    keep = data.JobFilter(topic or "", state or "", key or "", match)
    if id_prefix is not None:
        for name, given in (("since", since), ("until", until)):
            if given is not None:
                raise FieldInvalid(name, "does not apply to an id_prefix search")
        records, following = await data.jobs_with_id_prefix(s, id_prefix, cursor or "", limit, keep)
        items = [JobOut.of(j) if j is not None else JobOut.of_record(r) for r, j in records]
        return JobPageOut(items=items, cursor=following)
    page = await s.jobs(
        topic, state, limit, cursor, key=key, since=_aware(since), until=_aware(until)
    )
    return JobPageOut(
        items=[JobOut.of(j) for j in page.items if match is None or keep.keeps(j, None)],
        cursor=page.cursor,
    )


def _aware(value: datetime | None) -> datetime | None:
    from datetime import UTC

    return value if value is None or value.tzinfo else value.replace(tzinfo=UTC)


@router.get("/jobs/{job_id:path}", response_model=JobDetailOut, responses=ERRORS)
async def get_job(request: Request, who: Who, job_id: str) -> JobDetailOut:
    """A job from Redis and the audit trail, with its attempts (and what their listeners
    reported) and its attempt timeline, as the job's page shows them."""
    d = await data.job_detail(console_of(request).scheduler, job_id)
    if d is None:
        raise HTTPException(404, f"no job {job_id!r} in Redis or in the audit trail")
    t = d.timeline
    return JobDetailOut(
        id=d.id,
        state=d.state,
        job=JobOut.of(d.job) if d.job else None,
        audit_status=str(d.record.status) if d.record else None,
        trace_id=d.trace_id,
        attempts=[AttemptOut.of(a) for a in t.attempts] if t else [],
        timeline=[SpanOut.of(span, t.now) for span in t.spans] if t else [],
    )


@router.post(
    "/jobs/{job_id:path}/cancel",
    response_model=ActionOut,
    responses=ERRORS,
    openapi_extra=ACTION_BODY,
)
@acts(lambda p: ("cancel", p["job_id"]))
async def cancel_job(
    request: Request, who: Who, job_id: str, body: NoBody = ActionIn()
) -> ActionOut:
    """Stop all future attempts of a job."""
    return _action(await actions.job_action(console_of(request).scheduler, who, "cancel", job_id))


@router.post(
    "/jobs/{job_id:path}/retry",
    response_model=ActionOut,
    responses=ERRORS,
    openapi_extra=ACTION_BODY,
)
@acts(lambda p: ("retry", p["job_id"]))
async def retry_job(
    request: Request, who: Who, job_id: str, body: NoBody = ActionIn()
) -> ActionOut:
    """Run a failed or cancelled job again now with a fresh attempt budget."""
    return _action(await actions.job_action(console_of(request).scheduler, who, "retry", job_id))


@router.post(
    "/jobs/{job_id:path}/delete",
    response_model=ActionOut,
    responses=ERRORS,
    openapi_extra=ACTION_BODY,
)
@acts(lambda p: ("delete", p["job_id"]))
async def delete_job(
    request: Request, who: Who, job_id: str, body: NoBody = ActionIn()
) -> ActionOut:
    """Remove a job that is not running from Redis (the audit keeps its history)."""
    return _action(await actions.job_action(console_of(request).scheduler, who, "delete", job_id))


@router.post("/jobs/{job_id:path}/reschedule", response_model=ActionOut, responses=ERRORS)
@acts(lambda p: ("reschedule", p["job_id"]))
async def reschedule_job(request: Request, who: Who, job_id: str, body: RescheduleIn) -> ActionOut:
    """Move a scheduled or retrying job to `run_at`."""
    return _action(
        await actions.job_action(
            console_of(request).scheduler, who, "reschedule", job_id, run_at=body.run_at, tz=body.tz
        )
    )


# ------------------------------------------------------------------------------- flows
@router.get("/flows/{root_id:path}", response_model=FlowNodeOut, responses=ERRORS)
async def get_flow(request: Request, who: Who, root_id: str) -> FlowNodeOut:
    """A flow from its root (the id creating it returned): each job's id, topic, state and
    result, and under each job the jobs it runs after, as `horae jobs flow ROOT_ID --json`
    prints it. 404: no such job, a job of no flow, or a node below the root (the message names
    the root)."""
    tree = await console_of(request).scheduler.get_flow(root_id)
    if tree is None or tree.job is None or tree.job.flow != root_id:  # (one read: no get_job)
        raise HTTPException(404, not_a_root(None if tree is None else tree.job, root_id))
    return FlowNodeOut.of(tree)


# ------------------------------------------------------------------------------- crons
@router.get("/crons", response_model=CronPageOut, responses=ERRORS)
async def list_crons(request: Request, who: Who) -> CronPageOut:
    """Every recurring schedule, by name, with its last outcome and its recent ticks (the
    Schedules page's 8)."""
    s = console_of(request).scheduler
    crons = sorted(await s.list_crons(), key=lambda c: c.name)
    history = await data.tick_history(s, crons)
    return CronPageOut(items=[CronOut.of(c, history.get(c.name)) for c in crons])


@router.get("/crons/{name:path}", response_model=CronOut, responses=ERRORS)
async def get_cron(
    request: Request,
    who: Who,
    name: str,
    ticks: Annotated[
        int, Query(ge=1, le=MAX_TICKS, description="how many recent ticks `recent_ticks` holds.")
    ] = data.TICKS_SHOWN,
) -> CronOut:
    """One schedule with its last outcome and its history: its latest `ticks` fires with their
    job's state, newest first."""
    s = console_of(request).scheduler
    info = await s.get_cron(name)
    if info is None:
        raise HTTPException(404, f"no schedule named {name!r}")
    history = await data.tick_history(s, [info], ticks)
    return CronOut.of(info, history.get(info.name))


@router.post(
    "/crons/{name:path}/{action}",
    response_model=ActionOut,
    responses=ERRORS,
    openapi_extra=ACTION_BODY,
)
@acts(
    lambda p: (
        (f"cron.{p['action']}", p["name"]) if p.get("action") in actions.CRON_ACTIONS else None
    )
)
async def cron_action(
    request: Request,
    who: Who,
    name: str,
    action: Literal["pause", "resume", "trigger"],
    body: NoBody = ActionIn(),
) -> ActionOut:
    """Pause or resume a schedule from its next tick, or run one tick now."""
    return _action(await actions.cron_action(console_of(request).scheduler, who, action, name))


# ----------------------------------------------------------------------------- workers
@router.get("/workers", response_model=WorkerPageOut, responses=ERRORS)
async def list_workers(request: Request, who: Who) -> WorkerPageOut:
    """The live workers (as their last heartbeat advertised them), by id, each running or
    draining."""
    return WorkerPageOut(
        items=[WorkerOut.of(w) for w in await console_of(request).scheduler.workers()]
    )


@router.post(
    "/workers/{worker_id:path}/drain",
    status_code=202,
    response_model=ActionOut,
    responses=ERRORS,
    openapi_extra=ACTION_BODY,
)
@acts(lambda p: ("worker.drain", p["worker_id"]))
async def drain_worker(
    request: Request, who: Who, worker_id: str, body: NoBody = ActionIn()
) -> ActionOut:
    """Ask one live worker to drain and exit (accepted: it stops claiming at its next heartbeat,
    its running attempts get its grace to finish, then it exits). 404: no live worker has that
    id."""
    return _action(await actions.drain_worker(console_of(request).scheduler, who, worker_id))


# ------------------------------------------------------------------------ dead letters
@router.get("/dead-letters", response_model=DeadLetterTopicPageOut, responses=ERRORS)
async def list_dead_letter_topics(request: Request, who: Who) -> DeadLetterTopicPageOut:
    """Every dead-letter topic that holds or held dead letters, with how many it holds now."""
    found = await data.dead_letter_topics(console_of(request).scheduler)
    return DeadLetterTopicPageOut(
        items=[DeadLetterTopicOut(topic=d.topic, count=d.count) for d in found]
    )


@router.get("/dead-letters/{topic:path}", response_model=JobPageOut, responses=ERRORS)
async def list_dead_letters(
    request: Request,
    who: Who,
    topic: str,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: CursorQuery = None,
) -> JobPageOut:
    """A page of the dead letters `topic` holds, oldest first; pass `cursor` back for the next
    one (null: the last). Each is a job of the dead-letter topic; its metadata names the source
    topic and job, the error and when it failed. 404: not a topic GET /api/v1/dead-letters lists."""
    s = console_of(request).scheduler
    if topic not in await s.store.dead_letter_topics():  # (also `…/{job_id}/replay` asked with GET)
        raise HTTPException(
            404,
            f"no dead letters on topic {topic[:200]!r}: GET /api/v1/dead-letters lists "
            "the dead-letter topics",
        )
    page = await s.dead_letters(topic, limit, cursor)
    return JobPageOut(items=[JobOut.of(j) for j in page.items], cursor=page.cursor)


@router.post(
    "/dead-letters/{job_id:path}/replay",
    response_model=ActionOut,
    responses=ERRORS,
    openapi_extra=ACTION_BODY,
)
@acts(lambda p: ("dead_letter.replay", p["job_id"]))
async def replay_dead_letter(
    request: Request, who: Who, job_id: str, body: NoBody = ActionIn()
) -> ActionOut:
    """Schedule a dead letter's payload again on its source topic (a new job, due now: `job_id`)
    and remove the dead letter."""
    return _action(
        await actions.dead_letter_action(console_of(request).scheduler, who, "replay", job_id)
    )


@router.post(
    "/dead-letters/{job_id:path}/delete",
    response_model=ActionOut,
    responses=ERRORS,
    openapi_extra=ACTION_BODY,
)
@acts(lambda p: ("dead_letter.delete", p["job_id"]))
async def delete_dead_letter(
    request: Request, who: Who, job_id: str, body: NoBody = ActionIn()
) -> ActionOut:
    """Remove one dead letter (the audit keeps its history). 404: no dead letter has that id."""
    return _action(
        await actions.dead_letter_action(console_of(request).scheduler, who, "delete", job_id)
    )


# ------------------------------------------------------------------------ topics, stats
@router.get("/topics", response_model=TopicPageOut, responses=ERRORS)
async def list_topics(request: Request, who: Who) -> TopicPageOut:
    """Every topic with jobs, a configuration or memory (as `horae topics list`), with its jobs per
    state and what its limits hold back (parked due jobs, blocked keys)."""
    s = console_of(request).scheduler
    counts, listed, names = await asyncio.gather(
        s.stats_by_topic(), s.list_topics(), every_topic(s)
    )
    configured = set(listed)

    async def one(name: str) -> TopicOut:
        options = await s.get_topic(name) if name in configured else None
        held = await held_back(s, name, options)
        return TopicOut(
            name=name,
            counts=counts.get(name, dict.fromkeys(COUNT_KEYS, 0)),
            configured=options is not None,
            options=_options(options),
            parked=held.parked,
            parked_next_at=held.parked_next,
            blocked_keys=held.blocked_keys,
        )

    # the topics' reads go out together (one pipelined wire), not one topic after another
    return TopicPageOut(items=list(await asyncio.gather(*(one(n) for n in names))))


def _options(options: TopicOptions | None) -> dict[str, Any] | None:
    """A topic's options as JSON values (durations, policies and limits as their text)."""
    if options is None:
        return None
    raw = asdict(options)
    return {
        k: (str(v) if not isinstance(v, (int, float, str, bool, type(None), dict, list)) else v)
        for k, v in raw.items()
    }


@router.get("/stats", response_model=StatsOut, responses=ERRORS)
async def stats(request: Request, who: Who) -> StatsOut:
    """Jobs per state in Redis: totals and per topic."""
    s = console_of(request).scheduler
    return StatsOut(totals=await s.stats(), topics=await s.stats_by_topic())


@router.get("/charts", response_model=ChartsOut, responses=ERRORS)
async def charts(
    request: Request,
    who: Who,
    range_: Annotated[Range, Query(alias="range", description="1h or 24h")] = "1h",
    topic: Annotated[
        str | None, Query(max_length=MAX_TOPIC_LEN, description="one topic (absent: every topic)")
    ] = None,
) -> ChartsOut:
    """The charts' data (the overview's and the topic page's), from the audit relay's rollups:
    per topic, one value per minute of the last hour or per hour of the last 24 hours. A topic
    nothing is known of answers zeros."""
    s = console_of(request).scheduler
    now = ms_to_utc(s.clock.now_ms())
    names = [topic] if topic is not None else await every_topic(s)
    return ChartsOut.of(await read_trends(data.audit_of(s), range_, now, names, one=topic))
