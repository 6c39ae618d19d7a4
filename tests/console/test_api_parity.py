"""The API at parity with the library (issue 31): durations as the library writes them,
a state conflict as a 409 (and the job page offering only what the state allows, from the
same table), the dead letters listed, replayed and deleted over HTTP. Real Redis and
PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from console import actions
from console.app import create_app
from scheduler.api import Scheduler
from scheduler.core.topic_options import TopicOptions
from tests.console.conftest import Env, failing_job, registry, settings_for, settle

DLQ = "pay.charge.dead"


def _error(r: httpx.Response, status: int, field: str | None) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text)
    error = r.json()["error"]
    assert set(error) == {"code", "message", "field"} and error["message"], error
    assert error["field"] == field, error
    return error


# ---------------------------------------------------------------------------- durations
async def test_delay_and_timeout_as_the_library_writes_them(env: Env) -> None:
    before = datetime.now(UTC)
    r = await env.client.post(
        "/api/v1/jobs", json={"topic": "pay.report", "delay": "1h30m", "timeout": "2s"}
    )
    assert r.status_code == 201, r.text
    job = await env.scheduler.get_job(r.json()["job_id"])
    assert job is not None and job.state.value == "scheduled"
    assert before + timedelta(minutes=90) <= job.run_at <= datetime.now(UTC) + timedelta(minutes=90)
    assert job.timeout_ms == 2000
    seconds = await env.client.post(
        "/api/v1/jobs", json={"topic": "pay.report", "delay": 60, "timeout": 1.5}
    )
    assert seconds.status_code == 201, seconds.text
    job = await env.scheduler.get_job(seconds.json()["job_id"])
    assert job is not None and job.timeout_ms == 1500
    assert timedelta(seconds=55) <= job.run_at - before <= timedelta(seconds=65)


@pytest.mark.parametrize(
    ("body", "status", "field", "says"),
    [
        ({"delay": "1s", "delay_s": 1}, 422, "delay_s", "delay or delay_s, not both"),
        (
            {"delay": "1s", "run_at": "2030-01-01T00:00:00Z"},
            422,
            "delay",
            "run_at or delay, not both",
        ),
        ({"timeout": "1s", "timeout_s": 1}, 422, "timeout_s", "timeout or timeout_s, not both"),
        ({"delay": "90"}, 422, "delay", "a duration is required"),
        ({"delay": "soon"}, 422, "delay", "a duration is required"),
        ({"delay": -1}, 422, "delay", "seconds must be >= 0"),
        ({"delay": True}, 422, "delay", "a duration is required"),
        ({"timeout": 0}, 422, "timeout", "seconds must be > 0"),
        ({"delay": "30m1h"}, 400, "delay", "largest first"),
        ({"delay": "4000d"}, 400, "delay", "at most 3650 days"),
        ({"timeout": "31d"}, 400, "timeout", "at most 30 days"),
    ],
)
async def test_bad_durations_name_the_field_and_store_nothing(
    env: Env, body: dict[str, Any], status: int, field: str, says: str
) -> None:
    before = await env.scheduler.stats()
    error = _error(
        await env.client.post("/api/v1/jobs", json={"topic": "pay.report", **body}), status, field
    )
    assert says in error["message"], error
    assert await env.scheduler.stats() == before


# ------------------------------------------------------------------------ state conflicts
async def test_cancelling_a_failed_job_is_a_409_naming_its_state(env: Env) -> None:
    job_id = await failing_job(env.scheduler)
    error = _error(await env.client.post(f"/api/v1/jobs/{job_id}/cancel", json={}), 409, None)
    assert error["code"] == "STATE_CONFLICT"
    assert (
        f"job {job_id} is failed" in error["message"]
        and "scheduled or waiting_for_parents or retrying or running" in error["message"]
    )
    assert (await env.scheduler.get_job(job_id)).state.value == "failed"  # type: ignore[union-attr]
    await env.scheduler.audit.flush()
    logged = [(a.action, a.outcome) for a in await env.scheduler.audit.actions(job_id)]
    assert logged == [("cancel", "conflict")]
    _error(await env.client.post("/api/v1/jobs/no-such-job/cancel", json={}), 404, None)


async def test_every_job_action_answers_as_the_table_says(env: Env) -> None:
    """For jobs in each state the engine holds them in, each action over the API is done
    exactly when actions.allowed_actions (the job page's table) offers it, else a 409."""
    s = env.scheduler
    failed = await failing_job(s)
    done = await s.schedule_in("pay.report", timedelta(0))
    await settle(s, done)
    jobs = {"failed": failed, "completed": done}
    for action in actions.JOB_ACTIONS:
        for state in ("scheduled", "cancelled"):  # fresh ones per action: an action changes them
            job_id = await s.schedule_in("pay.report", timedelta(hours=1))
            if state == "cancelled":
                assert await s.cancel(job_id)
            jobs[state] = job_id
        for state, job_id in jobs.items():
            info = await s.get_job(job_id)
            assert info is not None and info.state.value == state
            offered = action in actions.allowed_actions(info)
            body = {"run_at": "2031-01-01T00:00:00Z"} if action == "reschedule" else {}
            r = await env.client.post(f"/api/v1/jobs/{job_id}/{action}", json=body)
            assert r.status_code == (200 if offered else 409), (
                action,
                state,
                r.status_code,
                r.text,
            )
            if state in ("failed", "completed") and offered:  # acted on: make it again
                jobs[state] = await failing_job(s) if state == "failed" else await _completed(s)


async def _completed(s: Any) -> str:
    job_id = await s.schedule_in("pay.report", timedelta(0))
    await settle(s, job_id)
    return str(job_id)


async def test_the_job_page_offers_only_what_the_state_allows(env: Env) -> None:
    failed = await failing_job(env.scheduler)
    scheduled = await env.scheduler.schedule_in("pay.report", timedelta(hours=1))
    offered = {}
    for job_id in (failed, scheduled):
        page = (await env.client.get(f"/jobs/{job_id}")).text
        offered[job_id] = [a for a in actions.JOB_ACTIONS if f'id="act-{a}"' in page]
    assert offered == {failed: ["retry", "delete"], scheduled: ["cancel", "reschedule", "delete"]}


async def test_unknown_schedules_are_404_on_every_schedule_action(env: Env) -> None:
    for action in ("pause", "resume", "trigger"):
        assert (
            "no schedule named 'nope'"
            in _error(await env.client.post(f"/api/v1/crons/nope/{action}", json={}), 404, None)[
                "message"
            ]
        )


# --------------------------------------------------------------------------- dead letters
async def test_dead_letters_listed_paged_replayed_and_deleted_over_http(env: Env) -> None:
    s = env.scheduler
    await s.configure_topic("pay.charge", TopicOptions(dead_letter=DLQ))
    sources = [await failing_job(s) for _ in range(3)]
    assert (await env.client.get("/api/v1/dead-letters")).json() == {
        "items": [{"topic": DLQ, "count": 3}],
        "cursor": None,
    }
    first = (await env.client.get(f"/api/v1/dead-letters/{DLQ}", params={"limit": 2})).json()
    assert len(first["items"]) == 2 and first["cursor"]
    rest = (
        await env.client.get(
            f"/api/v1/dead-letters/{DLQ}", params={"limit": 2, "cursor": first["cursor"]}
        )
    ).json()
    assert len(rest["items"]) == 1 and rest["cursor"] is None
    letters = first["items"] + rest["items"]
    assert [d["metadata"]["source_job_id"] for d in letters] == sources
    assert all(d["topic"] == DLQ and d["metadata"]["source_topic"] == "pay.charge" for d in letters)

    replayed = await env.client.post(f"/api/v1/dead-letters/{letters[0]['id']}/replay", json={})
    assert replayed.status_code == 200, replayed.text
    new_id = replayed.json()["job_id"]
    new = await s.get_job(new_id)
    assert (
        new is not None
        and new.topic == "pay.charge"
        and new.metadata["replayed_from"] == letters[0]["id"]
    )
    deleted = await env.client.post(f"/api/v1/dead-letters/{letters[1]['id']}/delete", json={})
    assert deleted.status_code == 200 and deleted.json()["outcome"] == "done", deleted.text
    assert (await env.client.get("/api/v1/dead-letters")).json() == {
        "items": [{"topic": DLQ, "count": 1}],
        "cursor": None,
    }
    assert (
        "no dead letters on topic 'pay.charge'"
        in _error(await env.client.get("/api/v1/dead-letters/pay.charge"), 404, None)["message"]
    )
    _error(
        await env.client.post(f"/api/v1/dead-letters/{letters[1]['id']}/delete", json={}), 404, None
    )
    _error(
        await env.client.post(f"/api/v1/dead-letters/{letters[0]['id']}/replay", json={}), 404, None
    )
    # a job that is no dead letter is not deleted by the dead-letter route
    _error(await env.client.post(f"/api/v1/dead-letters/{sources[2]}/delete", json={}), 404, None)
    assert await s.get_job(sources[2]) is not None
    await s.audit.flush()  # (the action log, newest first)
    assert [(a.actor, a.action, a.outcome) for a in await s.audit.actions(letters[0]["id"])] == [
        ("local", "dead_letter.replay", "not_found"),
        ("local", "dead_letter.replay", "done"),
    ]
    assert [(a.action, a.outcome) for a in await s.audit.actions(letters[1]["id"])] == [
        ("dead_letter.delete", "not_found"),
        ("dead_letter.delete", "done"),
    ]


async def test_dead_letter_routes_are_in_the_document_with_workers_and_conflicts(env: Env) -> None:
    doc = (await env.client.get("/api/v1/openapi.json")).json()
    assert {
        "/api/v1/dead-letters",
        "/api/v1/dead-letters/{topic}",
        "/api/v1/dead-letters/{job_id}/replay",
        "/api/v1/dead-letters/{job_id}/delete",
        "/api/v1/workers",
    } <= set(doc["paths"])
    assert "409" in doc["paths"]["/api/v1/jobs/{job_id}/cancel"]["post"]["responses"]
    assert (await env.client.get("/api/v1/workers")).status_code == 200


async def test_a_viewer_reads_dead_letters_but_replaying_one_is_refused_and_recorded(
    namespace: str, redis_url: str, database_url: str
) -> None:
    settings = settings_for(
        namespace, redis_url, database_url, viewer_token="v-secret", operator_token="o-secret"
    )
    s = Scheduler(settings=settings, listeners=registry())
    await s.connect()
    try:
        await s.configure_topic("pay.charge", TopicOptions(dead_letter=DLQ))
        async with s.worker(concurrency=2):
            await failing_job(s)
        letter = (await s.dead_letters(DLQ)).items[0].id
        transport = httpx.ASGITransport(app=create_app(scheduler=s), client=("10.0.0.7", 40000))
        viewer = {"Authorization": "Bearer v-secret"}
        async with httpx.AsyncClient(transport=transport, base_url="http://console:8080") as c:
            listed = await c.get("/api/v1/dead-letters", headers=viewer)
            assert listed.status_code == 200
            assert listed.json() == {"items": [{"topic": DLQ, "count": 1}], "cursor": None}
            for action in ("replay", "delete"):
                r = await c.post(f"/api/v1/dead-letters/{letter}/{action}", json={}, headers=viewer)
                assert r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN", r.text
        assert [d.id for d in (await s.dead_letters(DLQ)).items] == [letter]
        await s.audit.flush()
        assert [(a.actor, a.role, a.action, a.outcome) for a in await s.audit.actions(letter)] == [
            ("viewer", "viewer", "dead_letter.delete", "refused"),
            ("viewer", "viewer", "dead_letter.replay", "refused"),
        ]
    finally:
        await s.close()
