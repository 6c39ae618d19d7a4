"""The console's pages: server-rendered HTML and a little plain JavaScript (live refresh,
confirmations). Every action is a POST form carrying the CSRF token; it redirects back
with a message (post/redirect/get). Ids and names may hold any character, `/` included:
routes take them as paths, links and redirects percent-encode them (`segment`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, HTTPException, Query, Request
from fastapi.responses import FileResponse, RedirectResponse, Response

from console import actions, data, timeline
from console.auth import Principal, check_csrf
from console.charts import rate_bars
from console.deps import GuardedRoute, acts, caller, console_of
from console.family import family_of
from console.render import query, render, segment
from console.topic_detail import topic_detail
from console.trends import check_range, read_trends
from scheduler.core.errors import ScheduleError
from scheduler.core.timeutil import ms_to_utc
from scheduler.facade.listing import every_topic
from scheduler.store.listing import check_state

router = APIRouter(include_in_schema=False, route_class=GuardedRoute)
Who = Annotated[Principal, Depends(caller)]
Csrf = Annotated[str, Form()]
ChartRange = Annotated[str, Query(alias="range", description="the charts' range: 1h or 24h")]


def error_page(
    request: Request, status: int, message: str, headers: dict[str, str] | None = None
) -> Response:
    """An error as a page (the API answers JSON instead: console/app.py)."""
    return render(request, "error.html", status, headers, code=status, message=message)


def _checked(request: Request, who: Principal, csrf: str) -> None:
    """A form's token must be this browser session's and this caller's (console/auth.py)."""
    check_csrf(console_of(request).auth, request, who, csrf)


def _back(path: str, outcome: actions.Outcome) -> RedirectResponse:
    """Back to `path` with the action's message."""
    kind = "ok" if outcome.done else "warn"
    joint = "&" if "?" in path else "?"
    return RedirectResponse(
        f"{path}{joint}{urlencode({'msg': outcome.message, 'kind': kind})}", status_code=303
    )


def parse_instant(name: str, text: str | None) -> datetime | None:
    """A filter's time: ISO 8601, a time without an offset taken as UTC; None when empty.

    Raises:
        ScheduleError: naming the field and the value.
    """
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ScheduleError(
            f"{name} must be an ISO 8601 time like 2026-11-23T08:00; got {text!r}", field=name
        ) from exc
    return value if value.tzinfo else value.replace(tzinfo=UTC)


# ----------------------------------------------------------------------------- overview
async def _overview(request: Request, template: str, range_: str) -> Response:
    """The overview, or its live part alone (the same context)."""
    chosen = check_range(range_)
    c = console_of(request)
    view = await data.overview(c.scheduler)
    trends = await read_trends(
        data.audit_of(c.scheduler), chosen, view.at, [t.name for t in view.topics]
    )
    return render(
        request,
        template,
        view=view,
        page="overview",
        trends=trends,
        every=c.settings.console.refresh_ms,
        updated=datetime.now(UTC),  # (the wall clock: when this answer was made)
    )


@router.get("/")
async def overview(request: Request, who: Who, range_: ChartRange = "1h") -> Response:
    return await _overview(request, "overview.html", range_)


@router.get("/partials/overview")
async def overview_live(request: Request, who: Who, range_: ChartRange = "1h") -> Response:
    """The overview's live part, fetched again every few seconds by console.js."""
    return await _overview(request, "_overview_live.html", range_)


# ---------------------------------------------------------------------------------- jobs
@router.get("/jobs")
async def jobs(
    request: Request,
    who: Who,
    topic: str = "",
    state: str = "",
    key: str = "",
    since: str = "",
    until: str = "",
    id: str = "",
    payload: str = "",
    cursor: str = "",
    after: str = "",
) -> Response:
    """The jobs list: Redis's walk by state and time with its filters, or, given an id that is no
    job's, the jobs whose id starts with it (the audit's index); a payload field match filters
    either page (bounded: only the jobs that page examined)."""
    c = console_of(request)
    prefix = id.strip()
    filters = {
        "id": prefix,
        "topic": topic,
        "state": state,
        "key": key,
        "since": since,
        "until": until,
        "payload": payload,
    }
    check_state(state or None)
    match = data.PayloadMatch.parse(payload)
    keep = data.JobFilter(topic, state, key, match)
    size = c.settings.console.page_size
    if prefix and not after and await data.job_exists(c.scheduler, prefix):
        return RedirectResponse(f"/jobs/{segment(prefix)}", status_code=303)
    if prefix:
        rows, following = await data.jobs_by_id_prefix(c.scheduler, prefix, after, size, keep)
        next_link = query(filters, after=following) if following else None
    else:
        page = await c.scheduler.jobs(
            topic or None,
            state or None,
            size,
            cursor or None,
            key=key or None,
            since=parse_instant("since", since),
            until=parse_instant("until", until),
        )
        rows = [data.JobRow.of_job(j) for j in page.items if keep.keeps(j, None)]
        next_link = query(filters, cursor=page.cursor) if page.cursor else None
    topics = sorted(set(await c.scheduler.list_topics()) | set(await c.scheduler.stats_by_topic()))
    return render(
        request,
        "jobs.html",
        page="jobs",
        jobs=rows,
        next_link=next_link,
        paged=bool(cursor or after),
        filters=filters,
        topics=topics,
        states=data.STATES,
    )


# How often a job's page refreshes its live part (ms): a running job's progress moves quickly.
REFRESH_RUNNING_MS = 2000
REFRESH_WAITING_MS = 5000


async def _job_page(request: Request, job_id: str, template: str) -> Response:
    """The job's page, or its live part alone (the same context)."""
    c = console_of(request)
    detail = await data.job_detail(c.scheduler, job_id)
    if detail is None:
        raise HTTPException(404, f"no job {job_id!r} in Redis or in the audit trail")
    t = detail.timeline
    every = REFRESH_RUNNING_MS if t is not None and t.unsettled else REFRESH_WAITING_MS
    return render(
        request,
        template,
        page="jobs",
        d=detail,
        allowed=actions.allowed_actions(detail.job),
        trace_link=data.trace_link(c.settings.console.trace_url, detail.trace_id),
        timeline_svg=timeline.svg(detail.timeline, job_id) if detail.timeline else "",
        fam=await family_of(c.scheduler, job_id, detail.job),
        every=every,
        every_s=f"{every / 1000:g} s",
        updated=datetime.now(UTC),  # (the wall clock: when this answer was made)
    )


@router.get("/jobs/{job_id:path}")
async def job(request: Request, job_id: str, who: Who) -> Response:
    return await _job_page(request, job_id, "job.html")


@router.get("/partials/jobs/{job_id:path}")
async def job_live(request: Request, job_id: str, who: Who) -> Response:
    """The job page's live part (state, facts, timeline, attempts, actions), fetched again every
    few seconds by console.js while the job can still change."""
    return await _job_page(request, job_id, "_job_live.html")


@router.post("/jobs/{job_id:path}/{action}")
@acts(lambda p: (p["action"], p["job_id"]) if p.get("action") in actions.JOB_ACTIONS else None)
async def job_action(
    request: Request,
    job_id: str,
    action: str,
    who: Who,
    csrf: Csrf,
    run_at: Annotated[str, Form()] = "",
    tz: Annotated[str, Form()] = "UTC",
) -> Response:
    _checked(request, who, csrf)
    if action not in actions.JOB_ACTIONS:
        raise HTTPException(
            404, f"no job action {action!r}; allowed: {', '.join(actions.JOB_ACTIONS)}"
        )
    when = None
    if action == "reschedule":
        if not run_at:
            raise ScheduleError("run_at is required to reschedule", field="run_at")
        try:
            when = datetime.fromisoformat(run_at)  # without an offset: wall-clock time in `tz`
        except ValueError:
            raise ScheduleError(
                f"run_at must be an ISO 8601 time like 2026-11-24T09:00; got {run_at!r}",
                field="run_at",
            ) from None
    outcome = await actions.job_action(
        console_of(request).scheduler, who, action, job_id, run_at=when, tz=tz or "UTC"
    )
    return _back(f"/jobs/{segment(job_id)}", outcome)


# ------------------------------------------------------------------------------- crons
@router.get("/crons")
async def crons(request: Request, who: Who) -> Response:
    s = console_of(request).scheduler
    items = await s.list_crons()
    history = await data.tick_history(s, items)
    last = {c.name: o for c in items if (o := data.last_outcome(c, history.get(c.name)))}
    return render(
        request,
        "crons.html",
        page="crons",
        crons=sorted(items, key=lambda c: c.name),
        last=last,
        history=history,
        at=ms_to_utc(s.clock.now_ms()),
    )


@router.post("/crons/{name:path}/{action}")
@acts(
    lambda p: (
        (f"cron.{p['action']}", p["name"]) if p.get("action") in actions.CRON_ACTIONS else None
    )
)
async def cron_action(request: Request, name: str, action: str, who: Who, csrf: Csrf) -> Response:
    _checked(request, who, csrf)
    if action not in actions.CRON_ACTIONS:
        raise HTTPException(
            404, f"no schedule action {action!r}; allowed: {', '.join(actions.CRON_ACTIONS)}"
        )
    outcome = await actions.cron_action(console_of(request).scheduler, who, action, name)
    return _back("/crons", outcome)


# ----------------------------------------------------------------------------- workers
@router.get("/workers")
async def workers(request: Request, who: Who) -> Response:
    s = console_of(request).scheduler
    return render(
        request,
        "workers.html",
        page="workers",
        workers=await s.workers(),
        at=datetime.fromtimestamp(s.clock.now_ms() / 1000, UTC),
    )


@router.post("/workers/{worker_id:path}/drain")
@acts(lambda p: ("worker.drain", p["worker_id"]))
async def drain_worker(request: Request, worker_id: str, who: Who, csrf: Csrf) -> Response:
    _checked(request, who, csrf)
    return _back(
        "/workers", await actions.drain_worker(console_of(request).scheduler, who, worker_id)
    )


# ------------------------------------------------------------------ topics, dead letters
@router.get("/topics")
async def topics(request: Request, who: Who) -> Response:
    s = console_of(request).scheduler
    names = await every_topic(s)
    rows = []
    for name in names:
        options = await s.get_topic(name)
        blocked = (
            await s.blocked_keys(name) if options and options.policy == "key_strict_fifo" else []
        )
        dead = await s.dead_letters(name, limit=1)
        rows.append((name, options, blocked, bool(dead.items)))
    return render(request, "topics.html", page="topics", rows=rows)


async def _topic_page(request: Request, topic: str, template: str, range_: str) -> Response:
    """A topic's page, or its live part alone (the same context)."""
    if not topic:
        raise HTTPException(404, "no topic named: the topics are at /topics")
    chosen = check_range(range_)
    c = console_of(request)
    detail = await topic_detail(c.scheduler, topic, chosen, c.settings.analytics.baseline_days)
    return render(
        request,
        template,
        page="topics",
        t=detail,
        s=detail.series,
        every=c.settings.console.refresh_ms,
        updated=datetime.now(UTC),
    )


@router.get("/topics/{topic:path}")
async def topic_page(request: Request, topic: str, who: Who, range_: ChartRange = "1h") -> Response:
    """One topic: its charts, failure rate against its baseline, top errors, policy and limits."""
    return await _topic_page(request, topic, "topic.html", range_)


@router.get("/partials/topics/{topic:path}")
async def topic_live(request: Request, topic: str, who: Who, range_: ChartRange = "1h") -> Response:
    """The topic page's live part, fetched again every few seconds by console.js."""
    return await _topic_page(request, topic, "_topic_live.html", range_)


@router.get("/dead-letters")
async def dead_letters(request: Request, who: Who, topic: str = "", cursor: str = "") -> Response:
    """The dead-letter topics with their counts at once; `topic`'s letters below them."""
    s = console_of(request).scheduler
    held = await data.dead_letter_topics(s)
    known = topic in {d.topic for d in held}
    page = await s.dead_letters(topic, limit=50, cursor=cursor or None) if known else None
    return render(
        request, "dead_letters.html", page="dead", topic=topic, dead_topics=held, letters=page
    )


@router.post("/dead-letters/{job_id:path}/{action}")
@acts(
    lambda p: (
        (f"dead_letter.{p['action']}", p["job_id"])
        if p.get("action") in actions.DEAD_LETTER_ACTIONS
        else None
    )
)
async def dead_letter_action(
    request: Request,
    job_id: str,
    action: str,
    who: Who,
    csrf: Csrf,
    topic: Annotated[str, Form()] = "",
) -> Response:
    _checked(request, who, csrf)
    if action not in actions.DEAD_LETTER_ACTIONS:
        raise HTTPException(404, f"no dead-letter action {action!r}; allowed: replay, delete")
    outcome = await actions.dead_letter_action(console_of(request).scheduler, who, action, job_id)
    return _back(
        f"/dead-letters?{urlencode({'topic': topic})}" if topic else "/dead-letters", outcome
    )


@router.post("/topics/{topic:path}/dead-letters/{action}")
@acts(
    lambda p: {
        "purge": ("dead_letter.purge", p["topic"]),
        "replay": ("dead_letter.replay_all", p["topic"]),
    }.get(p.get("action", ""))
)
async def dead_letters_bulk(
    request: Request, topic: str, action: str, who: Who, csrf: Csrf
) -> Response:
    _checked(request, who, csrf)
    s = console_of(request).scheduler
    if action == "purge":
        outcome = await actions.purge_dead_letters(s, who, topic)
    elif action == "replay":
        outcome = await actions.replay_all(s, who, topic)
    else:
        raise HTTPException(404, f"no bulk action {action!r}; allowed: purge, replay")
    return _back(f"/dead-letters?{urlencode({'topic': topic})}", outcome)


# ----------------------------------------------------------------------------- analytics
@router.get("/analytics")
async def analytics(request: Request, who: Who) -> Response:
    c = console_of(request)
    days = c.settings.analytics.baseline_days
    found = await data.analytics(c.scheduler, c.report_dir, days)
    chart = (
        rate_bars(
            [
                (t["topic"], t.get("failure_rate"), found.baseline.get(t["topic"]))
                for t in found.summary.get("topics", [])
            ]
        )
        if found
        else ""
    )
    return render(
        request,
        "analytics.html",
        page="analytics",
        a=found,
        report_dir=c.report_dir,
        chart=chart,
        baseline_days=days,
    )


@router.get("/analytics/report.html")
async def analytics_report(request: Request, who: Who) -> Response:
    c = console_of(request)
    where = data.latest_summary_dir(c.report_dir)
    if where is None or not (where / "report.html").is_file():
        raise HTTPException(404, f"no report.html under {c.report_dir}")
    return FileResponse(where / "report.html", media_type="text/html")
