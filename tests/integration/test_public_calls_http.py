"""Every route of the console's /api/v1 with Redis gone under its Scheduler: 503 in the API's
error shape {"error": {code, message, field}}, never a 500. The routes are enumerated from the
API router, so a new one must get a row here."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from console.api import router
from console.app import create_app
from scheduler.api import Scheduler
from tests.integration.test_public_calls import redis_gone  # noqa: F401 - the fixture

# (method, path with converters dropped) -> (a concrete path, the JSON body of an action)
ROUTES: dict[tuple[str, str], tuple[str, Any]] = {
    ("POST", "/api/v1/jobs"): ("/api/v1/jobs", {"topic": "t/x"}),
    ("GET", "/api/v1/jobs"): ("/api/v1/jobs", None),
    ("GET", "/api/v1/jobs/{job_id}"): ("/api/v1/jobs/j-x", None),
    ("POST", "/api/v1/jobs/{job_id}/cancel"): ("/api/v1/jobs/j-x/cancel", {}),
    ("POST", "/api/v1/jobs/{job_id}/retry"): ("/api/v1/jobs/j-x/retry", {}),
    ("POST", "/api/v1/jobs/{job_id}/delete"): ("/api/v1/jobs/j-x/delete", {}),
    ("POST", "/api/v1/jobs/{job_id}/reschedule"): (
        "/api/v1/jobs/j-x/reschedule",
        {"run_at": "2030-01-01T00:00:00Z"},
    ),
    ("GET", "/api/v1/flows/{root_id}"): ("/api/v1/flows/j-x", None),
    ("GET", "/api/v1/crons"): ("/api/v1/crons", None),
    ("GET", "/api/v1/crons/{name}"): ("/api/v1/crons/n-x", None),
    ("POST", "/api/v1/crons/{name}/{action}"): ("/api/v1/crons/n-x/pause", {}),
    ("GET", "/api/v1/topics"): ("/api/v1/topics", None),
    ("GET", "/api/v1/stats"): ("/api/v1/stats", None),
    ("GET", "/api/v1/charts"): ("/api/v1/charts", None),
    ("GET", "/api/v1/workers"): ("/api/v1/workers", None),
    ("POST", "/api/v1/workers/{worker_id}/drain"): ("/api/v1/workers/w-x/drain", {}),
    ("GET", "/api/v1/dead-letters"): ("/api/v1/dead-letters", None),
    ("GET", "/api/v1/dead-letters/{topic}"): ("/api/v1/dead-letters/t/x.dead", None),
    ("POST", "/api/v1/dead-letters/{job_id}/replay"): ("/api/v1/dead-letters/d-x/replay", {}),
    ("POST", "/api/v1/dead-letters/{job_id}/delete"): ("/api/v1/dead-letters/d-x/delete", {}),
}


def api_routes() -> set[tuple[str, str]]:
    return {
        (method, re.sub(r":[^}]+}", "}", route.path))
        for route in router.routes
        for method in getattr(route, "methods", ())
    }


def test_the_table_names_every_route() -> None:
    assert api_routes() == set(ROUTES)


@pytest.fixture
async def client(redis_gone: Scheduler) -> AsyncIterator[httpx.AsyncClient]:  # noqa: F811
    app = create_app(scheduler=redis_gone)
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as c:
        yield c


@pytest.mark.parametrize("route", sorted(ROUTES), ids=" ".join)
async def test_with_redis_down_every_route_answers_503_in_the_error_shape(
    client: httpx.AsyncClient, route: tuple[str, str]
) -> None:
    path, body = ROUTES[route]
    r = (
        await client.request(route[0], path, json=body)
        if body is not None
        else await client.request(route[0], path)
    )
    assert r.status_code == 503, (r.status_code, r.text)
    error = r.json()["error"]
    assert set(error) == {"code", "message", "field"} and error["code"] == "STORAGE_UNAVAILABLE", (
        error
    )
    assert error["message"] and error["field"] is None, error
