"""create_app: the console's ASGI application (pages, /api/v1, static files), its
Scheduler's lifetime, and the one mapping of errors to HTTP answers."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from console.actions import Refused
from console.deps import Console
from console.gate import Gate
from horae.settings import Settings, load_settings
from scheduler.api import Scheduler
from scheduler.core.errors import JobNotFound, ScheduleError, SchedulerError, StorageError

HERE = Path(__file__).parent
log = logging.getLogger("horae.console")
# Pages load only this app's own scripts, styles and images: an injected tag cannot run.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def create_app(
    settings: Settings | None = None,
    scheduler: Scheduler | None = None,
    *,
    report_dir: str | Path | None = None,
) -> FastAPI:
    """The console as an ASGI app.

    Args:
        settings: horae settings (`[console]` for auth and links); default: the scheduler's,
            else load_settings().
        scheduler: a Scheduler to use (connected or not; the app connects it if needed and
            leaves it open at shutdown); default: one the app makes from `settings`,
            connects and closes.
        report_dir: where the nightly reports are (default: `[analytics] report_dir`).
    """
    base = settings or (scheduler.settings if scheduler is not None else load_settings())
    console = Console(base, scheduler, Path(report_dir) if report_dir is not None else None)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        s = console.scheduler
        if console.owned or s._store is None:
            await s.connect()
        try:
            yield
        finally:
            if console.owned:
                await s.close()

    # FastAPI's own Swagger UI and ReDoc load their scripts from a CDN: /api/docs serves the
    # installed swagger-ui-py's instead (console/api_docs.py).
    app = FastAPI(
        title="horae",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/v1/openapi.json",
        description="Schedule jobs and look after them over HTTP (docs/how-to/console.md).",
    )
    app.state.console = console
    _install_probes(app, console)
    from console.api import router as api_router
    from console.api_docs import router as docs_router
    from console.pages import router as page_router

    app.include_router(api_router)
    app.include_router(docs_router)
    app.include_router(page_router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    _install_errors(app)
    if not console.auth.open:
        _document_auth(app)
    # Host, proxies and body size before anything else (added first: the headers below wrap it).
    app.add_middleware(Gate, settings=base.console, tokenless=console.auth.open)

    @app.middleware("http")
    async def headers(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response

    return app


def _install_probes(app: FastAPI, console: Console) -> None:
    """GET /healthz (the app answers) and /readyz (Redis, and PostgreSQL when the audit is
    on, answer: else 503 with the reason), for a load balancer's or the kubelet's probes:
    no auth (they carry no token), no data beyond the reason."""
    from audit.health import readiness

    @app.api_route("/healthz", methods=["GET", "HEAD"], include_in_schema=False)
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok", "reason": ""}, headers={"Cache-Control": "no-store"})

    @app.api_route("/readyz", methods=["GET", "HEAD"], include_in_schema=False)
    async def readyz() -> JSONResponse:
        s = console.scheduler
        if s._store is None:
            reason: str | None = "starting"
        else:
            database_url = (
                s.services.database_url if s._audit is not None else None
            )  # (the audit's pages)
            reason = await readiness(s.store.redis, database_url, redis_url=s.services.redis_url)()
        body = (
            {"status": "ready", "reason": ""}
            if reason is None
            else {"status": "unready", "reason": reason}
        )
        return JSONResponse(
            body, 200 if reason is None else 503, headers={"Cache-Control": "no-store"}
        )


def _document_auth(app: FastAPI) -> None:
    """A console with tokens says so in its OpenAPI document: every call takes HTTP basic
    auth (the token as password) or a bearer token, so generated clients send one."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = build()
            doc.setdefault("components", {})["securitySchemes"] = {
                "basic": {
                    "type": "http",
                    "scheme": "basic",
                    "description": "any user name; the token as password",
                },
                "bearer": {"type": "http", "scheme": "bearer", "description": "the token"},
            }
            doc["security"] = [{"basic": []}, {"bearer": []}]
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    """The API's one error shape."""
    return {"error": {"code": code, "message": message, "field": field}}


def _install_errors(app: FastAPI) -> None:
    from console.pages import error_page

    def answer(
        request: Request,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        if _is_api(request):
            return JSONResponse(error_body(code, message, field), status, headers=headers)
        return error_page(request, status, message, headers)

    @app.exception_handler(ScheduleError)
    async def bad_input(request: Request, exc: ScheduleError) -> Response:
        status = 404 if isinstance(exc, JobNotFound) else 400
        return answer(request, status, exc.code, str(exc), exc.field)

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> Response:
        return answer(request, 403, "FORBIDDEN", str(exc))

    @app.exception_handler(StorageError)
    async def storage(request: Request, exc: StorageError) -> Response:
        return answer(request, 503, "STORAGE_UNAVAILABLE", str(exc))

    @app.exception_handler(SchedulerError)
    async def other(request: Request, exc: SchedulerError) -> Response:
        return answer(request, 400, "INVALID", str(exc))

    @app.exception_handler(StarletteHTTPException)  # FastAPI's own and the router's 404/405
    async def http(request: Request, exc: StarletteHTTPException) -> Response:
        code = {
            400: "REQUEST_INVALID",
            401: "UNAUTHORIZED",
            403: "FORBIDDEN",
            404: "NOT_FOUND",
            405: "METHOD_NOT_ALLOWED",
            409: "STATE_CONFLICT",
            413: "PAYLOAD_TOO_LARGE",
            415: "UNSUPPORTED_MEDIA_TYPE",
            422: "REQUEST_INVALID",
        }.get(exc.status_code, "HTTP_ERROR")
        message, field, headers = (
            str(exc.detail),
            getattr(exc, "field", None),
            getattr(exc, "headers", None),
        )
        if exc.status_code == 400 and exc.detail == BODY_UNREADABLE:
            code, field = "REQUEST_INVALID", "body"  # FastAPI could not decode it (not UTF-8, say)
            message = "body: not JSON text in UTF-8"
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(request))}
        return answer(request, exc.status_code, code, message, field=field, headers=headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        # A bug of ours: logged with its traceback, answered in the error shape (never a
        # traceback to the caller). The server still sees the exception (Starlette re-raises).
        log.error("console: %s %s failed", request.method, request.url.path, exc_info=exc)
        return answer(
            request,
            500,
            "INTERNAL_ERROR",
            "the console failed on this request; its log has the details",
        )

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        field = blamed_field(first)
        value = first.get("input")
        message = f"{field}: {first.get('msg', 'invalid')}; got {str(value)[:200]!r}"
        if _is_api(request):
            return JSONResponse(error_body("REQUEST_INVALID", message, field), 422)
        return error_page(request, 422, message)


# What FastAPI answers when a body cannot be parsed at all (not UTF-8 JSON, say).
BODY_UNREADABLE = "There was an error parsing the body"


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the API or the pages serves at this path (the router's
    own 405 names only the first route that matched the path). Ids may hold `/`, so
    `/api/v1/jobs/a/cancel` also matches `GET /api/v1/jobs/{job_id}`: the routes with the
    most literal text in their template (`.../{job_id}/cancel`) are the resource's."""
    from console.api import router as api_router
    from console.pages import router as page_router

    path = request.scope.get("path", "")
    found: dict[int, set[str]] = {}
    for route in (*api_router.routes, *page_router.routes):
        regex, served = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is not None and served and regex.match(path):
            literal = len(re.sub(r"{[^}]*}", "", getattr(route, "path_format", "")))
            found.setdefault(literal, set()).update(served)
    return sorted(found[max(found)]) if found else []


def blamed_field(error: dict[str, Any]) -> str:
    """The request member one validation error blames, dotted (`metadata.a`, `limit`); the
    body as a whole ("body") when the error is about the body itself (not JSON, not an object)."""
    loc = [str(p) for p in error.get("loc", ())]
    where, rest = (
        (loc[0], loc[1:])
        if loc and loc[0] in ("body", "query", "path", "header", "cookie")
        else ("", loc)
    )
    if error.get("type") == "json_invalid":
        return "body"  # its loc's second item is a character offset, not a member
    return ".".join(rest) or where or "request"
