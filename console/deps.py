"""Request dependencies shared by the pages and the API: the console (what every handler
shares), the caller, and the route class that knows both before a request's body is read."""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

from console.auth import Auth, Principal, check_origin
from scheduler.api import Scheduler
from scheduler.core.validation import MAX_JSON_DEPTH

if TYPE_CHECKING:
    from horae.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])
# An action's audit name and target from its path parameters; None: no such action.
Describe = Callable[[Mapping[str, str]], "tuple[str, str] | None"]
# How deep a JSON body may nest: a payload's own limit (MAX_JSON_DEPTH) plus the request's levels
# around it.
MAX_BODY_DEPTH = MAX_JSON_DEPTH + 28


class Console:
    """What every request handler shares: the Scheduler, the settings, who may do what,
    and where the nightly reports are."""

    def __init__(
        self, settings: Settings, scheduler: Scheduler | None, report_dir: Path | None
    ) -> None:
        self.settings = settings
        self.owned = scheduler is None
        self.scheduler = scheduler if scheduler is not None else Scheduler(settings=settings)
        self.auth = Auth(settings.console)
        self.report_dir = (
            report_dir if report_dir is not None else Path(settings.analytics.report_dir)
        )


def console_of(request: Request) -> Console:
    return cast("Console", request.app.state.console)


def caller(request: Request) -> Principal:
    """The authenticated caller (kept on request.state for the templates)."""
    who = getattr(request.state, "who", None)
    if who is None:
        who = console_of(request).auth.principal(request)
        request.state.who = who
    return cast(Principal, who)


def acts(describe: Describe) -> Callable[[F], F]:
    """Mark an endpoint as an operator action; `describe` names it and its target for the
    audit's record of a refusal (from the path parameters, before the body is read)."""

    def mark(endpoint: F) -> F:
        endpoint.__horae_action__ = describe  # type: ignore[attr-defined]
        return endpoint

    return mark


class GuardedRoute(APIRoute):
    """A route that authenticates its caller before FastAPI reads the body (which it does
    before any dependency). For an action (a POST) it also checks, still before the body:
    the content type (the API takes JSON only, which no cross-site form can send), the
    Origin when there is one (a page's form must carry one, or a Referer) and the operator
    role (a viewer's refusal goes to the audit's action log); then an API body nested past
    MAX_BODY_DEPTH is refused by name. A viewer's or a
    stranger's body is never read; an operator's at most up to `[console] max_body_bytes`
    (console/gate.py)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        api = self.path.startswith("/api/")
        describe: Describe | None = getattr(self.endpoint, "__horae_action__", None)

        async def guarded(request: Request) -> Response:
            who = caller(request)
            if request.method == "POST":
                if api:
                    _json_only(request)
                check_origin(request, required=not api)
                if not who.can_act:
                    await _refuse(request, who, describe)
                if api:
                    _check_depth(await request.body())
            return await handler(request)

        return guarded


def _json_only(request: Request) -> None:
    """Actions take JSON only (a cross-site form cannot send it without a preflight)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise HTTPException(
            415,
            f"actions take a JSON body (Content-Type: application/json); got {kind or 'none'!r}",
        )


async def _refuse(request: Request, who: Principal, describe: Describe | None) -> None:
    """A viewer's action: recorded (when it names one) and refused, its body unread."""
    from console.actions import Refused, record

    named = describe(request.path_params) if describe is not None else None
    if named is not None:
        await record(
            console_of(request).scheduler,
            who,
            named[0],
            named[1],
            outcome="refused",
            detail={"role": who.role.value},
        )
    what = named[0] if named else "act"
    raise Refused(f"{who.name} is a {who.role.value}: only operators may {what}")


class TooDeep(HTTPException):
    """A JSON body nested past MAX_BODY_DEPTH (400, blaming the body; Python's parser
    would fail on it with a RecursionError that says nothing)."""

    def __init__(self) -> None:
        super().__init__(
            400, f"body: nested deeper than {MAX_BODY_DEPTH} levels of arrays and objects"
        )
        self.field = "body"


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")


def _check_depth(body: bytes) -> None:
    """Raise TooDeep when `body`'s arrays and objects nest past MAX_BODY_DEPTH (brackets
    inside strings do not count)."""
    if body.count(b"[") + body.count(b"{") <= MAX_BODY_DEPTH:
        return
    depth = 0
    for bracket in _BRACKETS.findall(_STRING.sub(b"", body)):
        depth += 1 if bracket in (b"[", b"{") else -1
        if depth > MAX_BODY_DEPTH:
            raise TooDeep()
