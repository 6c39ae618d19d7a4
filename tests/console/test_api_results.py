"""A job's result (what its listeners returned) in the HTTP API's job document and on the job
page, escaped; through the pytest plugin's time machine, whose `wait` returns it too. Real Redis
and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from console.app import create_app
from horae import Backoff, RetryPolicy, ScheduleArrivedEvent, on_event

pytestmark = pytest.mark.horae(raise_errors=False)
RESULTS = "api-results.render"
RESULT = {"pages": 3, "title": "<script>alert(1)</script>"}


@on_event(RESULTS)
async def render(event: ScheduleArrivedEvent) -> Any:
    """Fails its first attempt, then returns a result with markup in it."""
    if event.attempt == 1:
        raise RuntimeError("renderer busy")
    return RESULT


@pytest.fixture
async def api(horae: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(scheduler=horae), client=("127.0.0.1", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as client:
        yield client


async def test_the_result_is_in_wait_the_job_document_and_the_page(
    horae: Any, horae_clock: Any, api: httpx.AsyncClient
) -> None:
    job_id = await horae.schedule_in(
        RESULTS, 0, retry=RetryPolicy(attempts=2, backoff=Backoff("fixed", delay_ms=1000))
    )
    await horae_clock.advance("5s")
    info = await horae.wait(job_id, timeout=10)
    assert info.state.value == "completed" and info.result == RESULT
    await horae.audit.flush()

    r = await api.get(f"/api/v1/jobs/{job_id}")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["job"]["result"] == RESULT
    assert [a["result"] for a in doc["attempts"]] == [None, RESULT]
    schema = (await api.get("/api/v1/openapi.json")).json()
    assert "result" in schema["components"]["schemas"]["JobOut"]["properties"]

    page = await api.get(f"/jobs/{job_id}")
    assert page.status_code == 200, page.text
    assert '<pre class="json" id="result">' in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "<script>alert(1)</script>" not in page.text
