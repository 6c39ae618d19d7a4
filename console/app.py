"""create_app: the console's ASGI application (pages, /api/v1, static files), its
Scheduler's lifetime, and the one mapping of errors to HTTP answers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from console.actions import Refused
from console.auth import Auth
from scheduler.api import Scheduler
from scheduler.config import Settings, load_settings
from scheduler.errors import JobNotFound, ScheduleError, SchedulerError, StorageError

HERE = Path(__file__).parent
# Pages load only this app's own scripts, styles and images: an injected tag cannot run.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


class Console:
    """What every request handler shares: the Scheduler, the settings, who may do what,
    and where the nightly reports are."""

    def __init__(self, settings: Settings, scheduler: Scheduler | None, report_dir: Path | None) -> None:
        self.settings = settings
        self.owned = scheduler is None
        self.scheduler = scheduler if scheduler is not None else Scheduler(settings=settings)
        self.auth = Auth(settings.console)
        self.report_dir = report_dir if report_dir is not None else Path(settings.analytics.report_dir)


def create_app(settings: Settings | None = None, scheduler: Scheduler | None = None, *,
               report_dir: str | Path | None = None) -> FastAPI:
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

    app = FastAPI(title="horae", version="1", lifespan=lifespan, docs_url="/api/v1/docs",
                  redoc_url=None, openapi_url="/api/v1/openapi.json",
                  description="Schedule jobs and look after them over HTTP (README: Console).")
    app.state.console = console
    from console.api import router as api_router
    from console.pages import router as page_router

    app.include_router(api_router)
    app.include_router(page_router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    _install_errors(app)

    @app.middleware("http")
    async def headers(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response

    return app


def _is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    """The API's one error shape."""
    return {"error": {"code": code, "message": message, "field": field}}


def _install_errors(app: FastAPI) -> None:
    from console.pages import error_page

    def answer(request: Request, status: int, code: str, message: str, field: str | None = None,
               headers: dict[str, str] | None = None) -> Response:
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

    @app.exception_handler(HTTPException)
    async def http(request: Request, exc: HTTPException) -> Response:
        code = {401: "UNAUTHORIZED", 403: "FORBIDDEN", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED",
                415: "UNSUPPORTED_MEDIA_TYPE", 422: "REQUEST_INVALID"}.get(
            exc.status_code, "HTTP_ERROR")
        return answer(request, exc.status_code, code, str(exc.detail), None, getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        where = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")]
        field = ".".join(where) or None
        value = first.get("input")
        message = f"{field or 'request'}: {first.get('msg', 'invalid')}; got {str(value)[:200]!r}"
        if _is_api(request):
            return JSONResponse(error_body("REQUEST_INVALID", message, field), 422)
        return error_page(request, 422, message)
