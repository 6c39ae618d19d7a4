"""The HTTP API on a real Redis and PostgreSQL: scheduling with one call, reads, actions
by role, errors that name the field, the action log."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from console.app import create_app
from scheduler.api import Scheduler
from tests.console.conftest import Env, failing_job, registry, settings_for, settle


async def test_schedule_over_http_runs_the_job_and_its_attempts_come_back(env: Env) -> None:
    r = await env.client.post(
        "/api/v1/jobs", json={"topic": "pay.report", "payload": {"n": 1}, "key": "acct-9"}
    )
    assert r.status_code == 201, r.text
    job_id = r.json()["job_id"]
    assert r.json()["created"] is True
    await settle(env.scheduler, job_id)
    body = (await env.client.get(f"/api/v1/jobs/{job_id}")).json()
    assert body["state"] == "completed" and body["audit_status"] == "completed"
    assert body["job"]["key"] == "acct-9" and body["job"]["payload"] == {"n": 1}
    assert body["job"]["metadata"]["scheduled_by"] == "console:local"
    assert [a["outcome"] for a in body["attempts"]] == ["succeeded"]


async def test_run_at_in_a_zone_and_delay(env: Env) -> None:
    r = await env.client.post(
        "/api/v1/jobs",
        json={"topic": "pay.report", "run_at": "2030-03-10T02:30:00", "tz": "America/Chicago"},
    )
    assert r.status_code == 201, r.text
    job = (await env.client.get(f"/api/v1/jobs/{r.json()['job_id']}")).json()["job"]
    # 02:30 does not exist that day in Chicago (spring forward): the same rule as schedule_at,
    # the first instant after the gap (03:00 CDT)
    assert job["tz"] == "America/Chicago"
    assert datetime.fromisoformat(job["run_at"]) == datetime(2030, 3, 10, 8, 0, tzinfo=UTC)
    both = await env.client.post(
        "/api/v1/jobs", json={"topic": "pay.report", "run_at": "2030-01-01T00:00:00Z", "delay_s": 5}
    )
    assert both.status_code == 422 and "delay_s" in both.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"topic": "pay.report", "tz": "Mars/Olympus"}, "tz"),
        ({"topic": ""}, "topic"),
        ({"topic": "pay.report", "attempts": 0}, "attempts"),
        ({"topic": "pay.report", "priority": 5000}, "priority"),
        ({"topic": "pay.report", "surprise": 1}, "surprise"),
    ],
)
async def test_bad_input_names_the_field_and_stores_nothing(
    env: Env, body: dict, field: str
) -> None:
    before = await env.scheduler.stats()
    r = await env.client.post("/api/v1/jobs", json=body)
    assert r.status_code in (400, 422), r.text
    error = r.json()["error"]
    assert error["field"] == field and error["message"], error
    assert await env.scheduler.stats() == before


async def test_listing_filters_by_state_key_and_time(env: Env) -> None:
    s = env.scheduler
    far = datetime(2031, 6, 1, tzinfo=UTC)
    a = await s.schedule_at("pay.report", far, key="k-a")
    b = await s.schedule_at("pay.report", far + timedelta(days=1), key="k-b")
    await s.schedule_at("pay.report", far + timedelta(days=2), key="k-a")
    by_key = (
        await env.client.get("/api/v1/jobs", params={"state": "scheduled", "key": "k-b"})
    ).json()
    assert [j["id"] for j in by_key["items"]] == [b]
    window = (
        await env.client.get(
            "/api/v1/jobs",
            params={
                "state": "scheduled",
                "since": "2031-05-31T00:00:00Z",
                "until": "2031-06-01T12:00:00Z",
            },
        )
    ).json()
    assert [j["id"] for j in window["items"]] == [a]
    bad = await env.client.get("/api/v1/jobs", params={"state": "sleeping"})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "state"


async def test_retry_of_a_failed_job_is_recorded_with_the_actor(env: Env) -> None:
    job_id = await failing_job(env.scheduler)
    r = await env.client.post(f"/api/v1/jobs/{job_id}/retry", json={})
    assert r.json() == {"outcome": "done", "message": "retry: done", "job_id": None}
    actions = await env.scheduler.audit.actions(job_id)
    assert [(a.actor, a.role, a.action, a.outcome) for a in actions] == [
        ("local", "operator", "retry", "done")
    ]
    await settle(env.scheduler, job_id)  # (it fails again: its payload says so)
    again = await env.client.post(f"/api/v1/jobs/{job_id}/cancel", json={})
    assert again.status_code == 409 and "is failed" in again.json()["error"]["message"], again.text


async def test_actions_take_json_from_this_origin_only(env: Env) -> None:
    job_id = await env.scheduler.schedule_in("pay.report", timedelta(hours=1))
    form = await env.client.post(f"/api/v1/jobs/{job_id}/cancel", data={"x": "1"})
    assert form.status_code == 415 and form.json()["error"]["code"] == "UNSUPPORTED_MEDIA_TYPE"
    cross = await env.client.post(
        f"/api/v1/jobs/{job_id}/cancel", json={}, headers={"Origin": "https://evil.example"}
    )
    assert cross.status_code == 403
    assert (await env.scheduler.get_job(job_id)).state.value == "scheduled"


async def test_an_open_console_answers_loopback_only(env: Env) -> None:
    transport = httpx.ASGITransport(app=env.app, client=("10.1.2.3", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as remote:
        r = await remote.get(
            "/api/v1/stats"
        )  # (a loopback Host: the client's address is what is refused)
    assert r.status_code == 403 and "loopback" in r.json()["error"]["message"]


def _basic(user: str, token: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()}


async def test_tokens_give_roles_and_only_operators_act(
    namespace: str, redis_url: str, database_url: str
) -> None:
    settings = settings_for(
        namespace, redis_url, database_url, viewer_token="v-secret", operator_token="o-secret"
    )
    s = Scheduler(settings=settings, listeners=registry())
    await s.connect()
    await s.start_relay()
    try:
        job_id = await s.schedule_in("pay.report", timedelta(hours=1))
        transport = httpx.ASGITransport(app=create_app(scheduler=s), client=("10.0.0.7", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://console:8080") as c:
            anonymous = await c.get("/api/v1/stats")
            assert anonymous.status_code == 401 and anonymous.headers[
                "www-authenticate"
            ].startswith("Basic")
            assert (await c.get("/api/v1/stats", headers=_basic("ann", "wrong"))).status_code == 401
            assert (
                await c.get("/api/v1/stats", headers=_basic("ann", "v-secret"))
            ).status_code == 200
            viewer = await c.post(
                f"/api/v1/jobs/{job_id}/cancel", json={}, headers=_basic("ann", "v-secret")
            )
            assert viewer.status_code == 403
            assert (await s.get_job(job_id)).state.value == "scheduled"
            page = await c.get(f"/jobs/{job_id}", headers=_basic("ann", "v-secret"))
            assert page.status_code == 200 and "act-cancel" not in page.text
            operator = await c.post(
                f"/api/v1/jobs/{job_id}/cancel",
                json={},
                headers={"Authorization": "Bearer o-secret"},
            )
            assert operator.json()["outcome"] == "done"
        await s.audit.flush()
        log = [(a.actor, a.role, a.outcome) for a in await s.audit.actions(job_id)]
        assert log == [("operator", "operator", "done"), ("ann", "viewer", "refused")]
        events = [e[1] for e in await s.audit.events(job_id)]
        assert "cancelled" in events
    finally:
        await s.close()


async def test_openapi_document_lists_the_calls(env: Env) -> None:
    doc = (await env.client.get("/api/v1/openapi.json")).json()
    paths = set(doc["paths"])
    assert {
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}",
        "/api/v1/jobs/{job_id}/cancel",
        "/api/v1/crons",
        "/api/v1/crons/{name}/{action}",
        "/api/v1/topics",
        "/api/v1/stats",
    } <= paths
    assert not any(p.startswith("/jobs") for p in paths)  # the pages are not part of the API
