"""Templates and the filters they share: every value is escaped (autoescape), times are
shown in their zone and in UTC, JSON pretty-printed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode
from zoneinfo import ZoneInfo

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from console.auth import CSRF_COOKIE, csrf_token, session_nonce
from console.charts import depth_chart, finished_chart
from console.data import plural, pretty_json
from console.timeline import duration
from console.trends import RANGES
from scheduler.core.flow import RateLimit
from scheduler.core.timeutil import rfc3339

_env = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def utc(value: datetime | None) -> str:
    """An instant as every output shows it (timeutil.rfc3339: UTC, milliseconds, "Z")."""
    return rfc3339(value) or "—"


def in_zone(value: datetime | None, tz: str | None) -> str:
    """An instant in `tz` (with its offset and abbreviation); UTC alone when `tz` is UTC."""
    if value is None:
        return "—"
    if (tz or "UTC") in ("UTC", "Etc/UTC"):
        return utc(value)
    try:
        local = value.astimezone(ZoneInfo(tz or "UTC"))
    except (KeyError, ValueError):
        return utc(value)
    return local.strftime("%Y-%m-%d %H:%M:%S %Z (%z)") + f" {tz}"


def ago(value: datetime | None, now: datetime | None = None) -> str:
    """How long before `now` (default: the wall clock), for people."""
    if value is None:
        return "—"
    s = ((now or datetime.now(UTC)) - value).total_seconds()
    if abs(s) < 90:
        return f"{s:.0f} s ago" if s >= 0 else f"in {-s:.0f} s"
    m = s / 60
    if abs(m) < 90:
        return f"{m:.0f} min ago" if m >= 0 else f"in {-m:.0f} min"
    h = m / 60
    return f"{h:.1f} h ago" if h >= 0 else f"in {-h:.1f} h"


def rate(value: float | None) -> str:
    """A jobs-per-second figure."""
    if value is None:
        return "—"
    return f"{value:.2f}/s" if value < 10 else f"{value:.0f}/s"


def count(value: int | None, unit: str) -> str:
    """A count with its unit, grouped by thousands: "1 letter", "12,400 letters"."""
    return "—" if value is None else plural(value, unit)


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def span(value: timedelta | float | None) -> str:
    """A topic option's duration for people ("30 s", "1 h 30 min"); seconds when a number."""
    if value is None:
        return "—"
    ms = round(value / timedelta(milliseconds=1) if isinstance(value, timedelta) else value * 1000)
    return f"{ms // 1000} s" if 1000 <= ms < 60_000 and ms % 1000 == 0 else duration(ms)


def rate_limit(value: RateLimit | None) -> str:
    """A topic's rate limit for people: "1 per 30 s", "10 per 1.00 s per key"."""
    if value is None:
        return "none"
    return f"{value.max:,} per {span(value.per_ms() / 1000)}{' per key' if value.per_key else ''}"


def query(params: dict[str, Any], **changes: Any) -> str:
    """The query string of `params` with `changes` (None and "" left out)."""
    merged = {**params, **changes}
    return urlencode({k: v for k, v in merged.items() if v not in (None, "")})


def segment(value: Any) -> str:
    """An id or a name as one path segment of a link: `/`, `%`, `?`, `#`, spaces and
    every non-ASCII character percent-encoded (Jinja's urlencode keeps `/`)."""
    return quote(str(value), safe="")


_env.filters.update(
    utc=utc,
    in_zone=in_zone,
    ago=ago,
    rate=rate,
    count=count,
    percent=percent,
    pretty=pretty_json,
    seg=segment,
    span=span,
    span_ms=duration,
    rate_limit=rate_limit,
)
_env.globals.update(
    query=query, finished_chart=finished_chart, depth_chart=depth_chart, chart_ranges=RANGES
)


def render(
    request: Request,
    template: str,
    status: int = 200,
    headers: dict[str, str] | None = None,
    **context: Any,
) -> HTMLResponse:
    """A page from `template`, with the caller, their CSRF token (the session cookie set
    when new; none before the caller is known) and the flash message of a redirect after
    an action."""
    console = request.app.state.console
    who = getattr(request.state, "who", None)
    nonce, new = session_nonce(request)
    token = csrf_token(console.auth, nonce, who) if who is not None else ""
    html = _env.get_template(template).render(
        request=request,
        csrf=token,
        who=who,
        flash=request.query_params.get("msg"),
        flash_kind=request.query_params.get("kind", "ok"),
        namespace=console.settings.namespace,
        **context,
    )
    response = HTMLResponse(html, status, headers=headers)
    if who is not None and new:
        response.set_cookie(
            CSRF_COOKIE,
            nonce,
            httponly=True,
            samesite="strict",
            path="/",
            secure=request.url.scheme == "https",
        )
    return response
