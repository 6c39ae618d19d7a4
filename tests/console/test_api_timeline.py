"""What the job page and the Schedules page show, over /api/v1 (issue 31): a job's attempt
timeline, its attempts' progress and log lines, the job search by id prefix and payload field,
and the schedules' history. Real Redis and PostgreSQL; the retries run on the plugin's clock."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from console.app import create_app
from horae import Backoff, RetryPolicy, ScheduleArrivedEvent, on_event
from tests.console.conftest import Env

pytestmark = pytest.mark.horae(raise_errors=False)
FLAKY, TICK = "api-timeline.flaky", "api-timeline.tick"
INSTANT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@on_event(FLAKY)
async def flaky(event: ScheduleArrivedEvent) -> None:
    """Reports progress and a log line, and fails its first two attempts."""
    await event.log(f"attempt {event.attempt}: charging")
    await event.progress(40, f"attempt {event.attempt} halfway")
    if event.attempt <= 2:
        raise RuntimeError(f"card declined on attempt {event.attempt}")
    await event.progress(100, "charged")


@on_event(TICK)
async def tick(event: ScheduleArrivedEvent) -> None:
    return None


@pytest.fixture
async def api(horae: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(scheduler=horae), client=("127.0.0.1", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as client:
        yield client


async def failed_twice_then_completed(horae: Any, horae_clock: Any) -> str:
    job_id = await horae.schedule_in(
        FLAKY,
        timedelta(seconds=5),
        payload={"order": 7},
        retry=RetryPolicy(attempts=3, backoff=Backoff("exponential", delay_ms=1000)),
    )
    await horae_clock.advance("30s")
    await horae.audit.flush()
    assert (await horae.get_job(job_id)).state.value == "completed"  # type: ignore[union-attr]
    return job_id


async def test_the_job_document_holds_its_timeline_and_what_each_attempt_reported(
    horae: Any, horae_clock: Any, api: httpx.AsyncClient
) -> None:
    job_id = await failed_twice_then_completed(horae, horae_clock)
    r = await api.get(f"/api/v1/jobs/{job_id}")
    assert r.status_code == 200, r.text
    doc = r.json()
    spans = [(s["kind"], s["status"], s["attempt"]) for s in doc["timeline"]]
    assert spans == [
        ("scheduled", "scheduled", None),
        ("attempt", "failed", 1),
        ("retry_wait", "waited", 2),
        ("attempt", "failed", 2),
        ("retry_wait", "waited", 3),
        ("attempt", "succeeded", 3),
        ("terminal", "completed", None),
    ]
    first, wait1, wait2 = doc["timeline"][0], doc["timeline"][2], doc["timeline"][4]
    assert first["duration_ms"] == 5000  # scheduled 5 s ahead
    assert (wait1["duration_ms"], wait2["duration_ms"]) == (1000, 2000)  # exponential backoff
    assert all(s["planned"] is False and INSTANT.match(s["start_at"]) for s in doc["timeline"])
    assert doc["timeline"][-1]["start_at"] == doc["job"]["finished_at"]
    attempts = doc["attempts"]
    assert [a["outcome"] for a in attempts] == ["failed", "failed", "succeeded"]
    assert [a["progress"] for a in attempts] == [
        {"percent": 40.0, "message": "attempt 1 halfway"},
        {"percent": 40.0, "message": "attempt 2 halfway"},
        {"percent": 100.0, "message": "charged"},
    ]
    assert [[line["line"] for line in a["logs"]] for a in attempts] == [
        ["attempt 1: charging"],
        ["attempt 2: charging"],
        ["attempt 3: charging"],
    ]
    assert all(a["due_at"] == a["started_at"] for a in attempts)  # (the clock waits for them)
    assert doc["job"]["progress"] == {"percent": 100.0, "message": "charged"}
    assert doc["timeline"][1]["end_at"] == attempts[0]["finished_at"]


async def test_a_waiting_retry_is_a_planned_span_and_a_scheduled_job_one_ahead(
    horae: Any, horae_clock: Any, api: httpx.AsyncClient
) -> None:
    job_id = await horae.schedule_in(
        FLAKY,
        timedelta(0),
        retry=RetryPolicy(attempts=3, backoff=Backoff("fixed", delay_ms=60_000)),
    )
    await horae_clock.run_until_idle()
    await horae.audit.flush()
    doc = (await api.get(f"/api/v1/jobs/{job_id}")).json()
    assert doc["state"] == "retrying"
    last = doc["timeline"][-1]
    assert (last["kind"], last["status"], last["attempt"], last["planned"]) == (
        "retry_wait",
        "waiting",
        2,
        True,
    )
    assert last["end_at"] == doc["job"]["next_attempt_at"] and last["duration_ms"] == 60_000
    later = await horae.schedule_in(FLAKY, timedelta(hours=2))
    doc = (await api.get(f"/api/v1/jobs/{later}")).json()
    assert [(s["kind"], s["planned"], s["duration_ms"]) for s in doc["timeline"]] == [
        ("scheduled", True, 7_200_000)
    ]
    assert doc["attempts"] == []


async def test_the_schedules_carry_their_history_as_the_page_shows_it(
    horae: Any, horae_clock: Any, api: httpx.AsyncClient
) -> None:
    await horae.schedule_cron("api-tick", "*/5 * * * *", topic=TICK)
    await horae.schedule_cron("api-idle", "0 0 1 1 *", topic=TICK)
    await horae_clock.advance("16m")
    await horae.audit.flush()
    listed = (await api.get("/api/v1/crons")).json()
    by_name = {c["name"]: c for c in listed["items"]}
    ticking = by_name["api-tick"]
    assert ticking["last_outcome"] == "completed"
    ticks = ticking["recent_ticks"]
    assert len(ticks) == 3 and [t["state"] for t in ticks] == ["completed"] * 3
    assert ticks[0]["at"] == ticking["last_run_at"]
    assert [t["at"] for t in ticks] == sorted((t["at"] for t in ticks), reverse=True)
    for t in ticks:  # each tick's job is there to open
        assert (await api.get(f"/api/v1/jobs/{t['job_id']}")).json()["state"] == "completed"
    assert (by_name["api-idle"]["last_outcome"], by_name["api-idle"]["recent_ticks"]) == (None, [])
    one = (await api.get("/api/v1/crons/api-tick", params={"ticks": 2})).json()
    assert one["recent_ticks"] == ticks[:2] and one["last_outcome"] == "completed"
    page = (await api.get("/crons")).text  # the page shows the same ticks
    shown = re.findall(r'<a class="tick (\w+)" href="/jobs/([^"]+)"', page)
    assert [(s, i.replace("%3A", ":")) for s, i in shown if "api-tick" in i] == [
        (t["state"], t["job_id"]) for t in ticks
    ]
    too_many = await api.get("/api/v1/crons/api-tick", params={"ticks": 101})
    assert too_many.status_code == 422 and too_many.json()["error"]["field"] == "ticks"


async def test_jobs_are_searched_by_id_prefix_and_payload_field_over_the_api(env: Env) -> None:
    s = env.scheduler
    for n in range(3):
        await s.schedule_in("pay.report", timedelta(hours=1), job_id=f"ord-9/{n}", payload={"n": n})
    await s.schedule_in("pay.report", timedelta(hours=1), job_id="ord-90", payload={"n": 1})
    gone = await s.schedule_in(
        "pay.report", timedelta(hours=1), job_id="ord-9/gone", payload={"n": 1}
    )
    await s.delete(gone)  # past Redis: the audit still knows it
    await s.audit.flush()

    def ids(r: httpx.Response) -> list[str]:
        assert r.status_code == 200, r.text
        return [j["id"] for j in r.json()["items"]]

    found = await env.client.get("/api/v1/jobs", params={"id_prefix": "ord-9/"})
    assert ids(found) == ["ord-9/0", "ord-9/1", "ord-9/2", "ord-9/gone"]
    assert [j["in_redis"] for j in found.json()["items"]] == [True, True, True, False]
    assert found.json()["cursor"] is None
    by_field = await env.client.get("/api/v1/jobs", params={"id_prefix": "ord-9", "payload": "n=1"})
    assert ids(by_field) == ["ord-9/1", "ord-9/gone", "ord-90"]
    paged = await env.client.get("/api/v1/jobs", params={"id_prefix": "ord-9", "limit": 2})
    assert ids(paged) == ["ord-9/0", "ord-9/1"] and paged.json()["cursor"] == "ord-9/1"
    following = await env.client.get(
        "/api/v1/jobs", params={"id_prefix": "ord-9", "limit": 2, "cursor": "ord-9/1"}
    )
    assert ids(following) == ["ord-9/2", "ord-9/gone"]
    listed = await env.client.get("/api/v1/jobs", params={"state": "scheduled", "payload": "n=2"})
    assert ids(listed) == ["ord-9/2"]
    scheduled = await env.client.get(
        "/api/v1/jobs", params={"id_prefix": "ord-9", "state": "scheduled", "payload": "n=1"}
    )
    assert ids(scheduled) == ["ord-9/1", "ord-90"]
    for params, status, field in [
        ({"payload": "no equals sign"}, 422, "payload"),
        ({"payload": "=1"}, 422, "payload"),
        ({"payload": ". =1"}, 400, "payload"),
        ({"id_prefix": "ord", "since": "2030-01-01T00:00:00Z"}, 422, "since"),
        ({"id_prefix": ""}, 422, "id_prefix"),
        ({"id_prefix": "   "}, 422, "id_prefix"),
    ]:
        r = await env.client.get("/api/v1/jobs", params=params)
        assert r.status_code == status, (params, r.status_code, r.text)
        assert r.json()["error"]["field"] == field, (params, r.text)
