"""What the API fuzz (test_api_fuzz.py) found, one focused test each: every refusal is the
error shape naming the field, the document says what the API takes, nothing is a 500."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

import console.app
from tests.console.conftest import Env


def _error(r: httpx.Response, status: int, field: str | None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"code", "message", "field"} and error["message"], error
    assert error["field"] == field, error
    return error  # type: ignore[no-any-return]


def test_the_console_under_test_is_this_checkout() -> None:
    """tests/console/__init__.py made pytest import the tests as the package `console`; the
    real one then came from wherever the editable install pointed (another checkout)."""
    assert Path(console.app.__file__).resolve().parents[1] == Path(__file__).resolve().parents[2]


async def test_unknown_paths_and_methods_answer_the_error_shape(env: Env) -> None:
    """The router's own 404 and 405 were FastAPI's {"detail": ...}, for the API and the pages."""
    _error(await env.client.get("/api/v1/nothing-here"), 404, None)
    r = await env.client.request("OPTIONS", "/api/v1/jobs")
    assert _error(r, 405, None)["code"] == "METHOD_NOT_ALLOWED"
    assert r.headers["allow"] == "GET, POST"  # every method served there, not the first route's
    for method, path, status in (("GET", "/no-such-page", 404), ("DELETE", "/jobs", 405)):
        page = await env.client.request(method, path)
        assert page.status_code == status and page.headers["content-type"].startswith(
            "text/html"
        ), page.text


async def test_non_finite_numbers_are_refused_by_name(env: Env) -> None:
    """Python's JSON parser takes NaN and Infinity, which JSON does not have."""
    for text, status, field in (
        (b'{"topic": "pay.report", "delay_s": NaN}', 422, "delay_s"),
        (b'{"topic": "pay.report", "timeout_s": Infinity}', 422, "timeout_s"),
        (b'{"topic": "pay.report", "priority": 1e400}', 422, "priority"),
        (b'{"topic": "pay.report", "payload": [NaN]}', 400, "payload"),
    ):
        r = await env.client.post(
            "/api/v1/jobs", content=text, headers={"Content-Type": "application/json"}
        )
        _error(r, status, field)


async def test_a_body_that_is_no_json_object_blames_the_body(env: Env) -> None:
    bodies = [
        b"\xff\xfe{}",
        b'{"topic": ',
        b"[1, 2]",
        b"null",
    ]  # a UTF-16 mark then no JSON, cut short, ...
    for path in ("/api/v1/jobs", "/api/v1/jobs/x/reschedule"):
        for content in bodies:
            r = await env.client.post(
                path, content=content, headers={"Content-Type": "application/json"}
            )
            assert _error(r, 422, "body")["code"] == "REQUEST_INVALID", (path, content)


async def test_an_undecodable_body_is_a_400_naming_the_body(env: Env) -> None:
    """FastAPI's own 400 'There was an error parsing the body' (UTF-8 JSON with a byte that
    is no UTF-8) was {"detail": ...} without a field."""
    r = await env.client.post(
        "/api/v1/jobs", content=b'{"topic": "\xff"}', headers={"Content-Type": "application/json"}
    )
    assert _error(r, 400, "body")["code"] == "REQUEST_INVALID"


async def test_actions_take_an_empty_object_or_an_empty_json_body(env: Env) -> None:
    s = env.scheduler
    a, b = [await s.schedule_in("pay.report", timedelta(hours=1)) for _ in range(2)]
    assert (await env.client.post(f"/api/v1/jobs/{a}/cancel", json={})).json()["outcome"] == "done"
    empty = await env.client.post(
        f"/api/v1/jobs/{b}/cancel", headers={"Content-Type": "application/json"}
    )
    assert empty.json()["outcome"] == "done"
    _error(await env.client.post(f"/api/v1/jobs/{b}/retry", json={"force": True}), 422, "force")
    _error(await env.client.post(f"/api/v1/jobs/{b}/retry", json=[]), 422, "body")
    assert (
        _error(await env.client.post(f"/api/v1/jobs/{b}/retry"), 415, None)["code"]
        == "UNSUPPORTED_MEDIA_TYPE"
    )
    doc = (await env.client.get("/api/v1/openapi.json")).json()
    for path in (
        "/api/v1/jobs/{job_id}/cancel",
        "/api/v1/jobs/{job_id}/retry",
        "/api/v1/jobs/{job_id}/delete",
        "/api/v1/crons/{name}/{action}",
    ):
        body = doc["paths"][path]["post"]["requestBody"]
        assert body["required"] is True and "application/json" in body["content"], path


SCHEDULE_REFUSALS: list[tuple[dict[str, Any], str]] = [
    ({"topic": "pay.report", "run_at": 0}, "run_at"),  # a number is no ISO 8601 text
    ({"topic": "pay.report", "run_at": "tomorrow"}, "run_at"),
    ({"topic": "pay.report", "attempts": True}, "attempts"),  # pydantic took true as 1
    ({"topic": "pay.report", "priority": "3"}, "priority"),
    ({"topic": "pay.report", "priority": False}, "priority"),
    ({"topic": "pay.report", "priority": 10**30}, "priority"),
    ({"topic": "pay.report", "delay_s": "5"}, "delay_s"),
    ({"topic": "pay.report", "delay_s": True}, "delay_s"),
    ({"topic": " "}, "topic"),  # blank: the engine refuses it, the document now says so
    ({"topic": "a\x00b"}, "topic"),
    ({"topic": "x" * 201}, "topic"),  # the engine's limit is 200, the document said 255
    ({"topic": "pay.report", "job_id": "j" * 201}, "job_id"),
    ({"topic": "pay.report", "key": "k\x00"}, "key"),
    ({"topic": "pay.report", "run_at": "2030-01-01T00:00:00Z", "delay_s": 5}, "delay_s"),
]


async def test_schedule_refuses_what_its_document_refuses_naming_the_field(env: Env) -> None:
    before = await env.scheduler.stats()
    for body, field in SCHEDULE_REFUSALS:
        _error(await env.client.post("/api/v1/jobs", json=body), 422, field)
    assert await env.scheduler.stats() == before


async def test_whole_floats_are_integers_and_exclusive_members_may_be_null(env: Env) -> None:
    """JSON Schema counts 2.0 as an integer; a generated client sends unset members as null."""
    r = await env.client.post(
        "/api/v1/jobs",
        json={
            "topic": "pay.report",
            "attempts": 2.0,
            "priority": 1.0,
            "run_at": None,
            "delay_s": 60,
        },
    )
    assert r.status_code == 201, r.text
    job = await env.scheduler.get_job(r.json()["job_id"])
    assert job is not None and job.max_attempts == 2 and job.priority == 1
    doc = (await env.client.get("/api/v1/openapi.json")).json()
    excluded = [
        rule["not"]["required"] for rule in doc["components"]["schemas"]["ScheduleIn"]["allOf"]
    ]
    assert ["run_at", "delay_s"] in excluded and ["timeout", "timeout_s"] in excluded


async def test_a_payload_nested_past_the_limit_is_refused_and_one_within_it_reads_back(
    env: Env,
) -> None:
    """A 900-deep payload was stored, then every read of it answered 500 (pydantic stops
    serializing 255 levels down): the engine now refuses more than 100 levels."""

    def nested(depth: int, member: str) -> Any:
        value: Any = 1
        for _ in range(depth):
            value = {"a": value} if member == "metadata" else [value]
        return value

    for member in ("payload", "metadata"):
        error = _error(
            await env.client.post(
                "/api/v1/jobs", json={"topic": "pay.report", member: nested(101, member)}
            ),
            400,
            member,
        )
        assert "at most 100 levels" in error["message"], error
        ok = await env.client.post(
            "/api/v1/jobs",
            json={"topic": "pay.report", member: nested(99, member), "delay_s": 3600},
        )
        assert ok.status_code == 201, ok.text
        job_id = ok.json()["job_id"]
        assert (await env.client.get(f"/api/v1/jobs/{job_id}")).status_code == 200
        listed = await env.client.get("/api/v1/jobs", params={"state": "scheduled"})
        assert listed.status_code == 200 and job_id in [j["id"] for j in listed.json()["items"]]


LISTING_REFUSALS: list[tuple[dict[str, str], int, str]] = [
    ({"key": ""}, 422, "key"),  # was a 400 from the engine: the document now bounds it
    ({"topic": " "}, 422, "topic"),
    ({"cursor": ""}, 422, "cursor"),
    ({"cursor": "garbage"}, 400, "cursor"),
    ({"since": "0"}, 422, "since"),  # pydantic took it for the epoch
    ({"since": "2031-01-02T00:00:00Z", "until": "2031-01-01T00:00:00Z"}, 400, "since"),
    ({"limit": "1.5"}, 422, "limit"),
    ({"state": ""}, 400, "state"),
]


async def test_listing_refusals_name_the_query_member(env: Env) -> None:
    for params, status, field in LISTING_REFUSALS:
        _error(await env.client.get("/api/v1/jobs", params=params), status, field)


async def test_instants_at_the_ends_of_time(env: Env) -> None:
    for params in ({"since": "0001-01-01T00:00:00+14:00"}, {"until": "9999-12-31T23:59:59-14:00"}):
        assert (await env.client.get("/api/v1/jobs", params=params)).status_code == 200
    r = await env.client.post(
        "/api/v1/jobs/x/reschedule", json={"run_at": "0001-01-01T00:00:00+00:01"}
    )
    # the message showed datetime.datetime(1, 1, 1, 0, 0, tzinfo=datetime.timezone(...))
    assert (
        "run_at 0001-01-01T00:00:00+00:01 in UTC falls outside"
        in _error(r, 400, "run_at")["message"]
    )


async def test_the_state_filter_lists_its_values_in_the_document(env: Env) -> None:
    doc = (await env.client.get("/api/v1/openapi.json")).json()
    state = next(
        p for p in doc["paths"]["/api/v1/jobs"]["get"]["parameters"] if p["name"] == "state"
    )
    assert state["schema"]["enum"] == [
        "scheduled",
        "waiting_for_parents",
        "running",
        "retrying",
        "completed",
        "failed",
        "cancelled",
    ]


async def test_schedule_actions_on_unknown_or_unchanged_schedules(env: Env) -> None:
    """An unknown name was a 400 blaming `name` for pause/resume but a not_found outcome for
    trigger (now a 404 for all three); a second pause said 'no schedule named' although it
    exists."""
    for action in ("pause", "resume", "trigger"):
        _error(await env.client.post(f"/api/v1/crons/nope/{action}", json={}), 404, None)
    _error(await env.client.post("/api/v1/crons/nope/explode", json={}), 422, "action")
    await env.scheduler.schedule_cron("nightly", "0 3 * * *", topic="pay.report")
    first = (await env.client.post("/api/v1/crons/nightly/pause", json={})).json()
    again = (await env.client.post("/api/v1/crons/nightly/pause", json={})).json()
    assert first == {"outcome": "done", "message": "pause: done", "job_id": None}
    assert again["outcome"] == "done" and "already" in again["message"], again
    assert (await env.scheduler.get_cron("nightly")).paused  # type: ignore[union-attr]


async def test_odd_path_parameters_are_plain_not_found(env: Env) -> None:
    for path in (
        "/api/v1/jobs/%00",
        "/api/v1/jobs/%FF",
        "/api/v1/jobs/" + "x" * 5000,
        "/api/v1/crons/%ED%A0%80",
    ):
        _error(await env.client.get(path), 404, None)


async def test_a_failure_of_ours_is_a_500_in_the_error_shape(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_: object, **__: object) -> dict[str, int]:
        raise RuntimeError("boom")

    monkeypatch.setattr(env.scheduler, "stats", broken)
    transport = httpx.ASGITransport(
        app=env.app, client=("127.0.0.1", 50001), raise_app_exceptions=False
    )
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as client:
        r = await client.get("/api/v1/stats")
    assert _error(r, 500, None)["code"] == "INTERNAL_ERROR" and "boom" not in r.text


def test_json_depth_counts_levels_not_brackets_in_strings() -> None:
    from scheduler.core.validation import json_depth

    assert json_depth(json.dumps(1)) == 0
    assert json_depth(json.dumps({"a": "[[[[{{", "b": [1, {"c": '\\"[['}]})) == 3
    assert json_depth(json.dumps([[[]], [[[[]]]]])) == 5
