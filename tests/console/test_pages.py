"""The pages' forms over HTTP (the browser tests click them; these check their edges): a
reschedule in a zone, a bad time refused naming the field with nothing changed, and a
form without this browser's CSRF token refused."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from tests.console.conftest import Env

ORIGIN = {"Origin": "http://127.0.0.1:8080"}  # (a browser sends it with a form's POST)


async def _csrf(env: Env, job_id: str) -> str:
    """The CSRF token of the job page's forms (bound to this client's session cookie)."""
    page = await env.client.get(f"/jobs/{job_id}")
    assert page.status_code == 200 and env.client.cookies["horae_csrf"]
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


async def test_reschedule_form_takes_wall_clock_time_in_the_zone(env: Env) -> None:
    job_id = await env.scheduler.schedule_in("pay.report", timedelta(hours=1))
    token = await _csrf(env, job_id)
    r = await env.client.post(
        f"/jobs/{job_id}/reschedule",
        data={"csrf": token, "run_at": "2031-01-02T09:00", "tz": "Europe/Berlin"},
        headers=ORIGIN,
    )
    assert r.status_code == 303 and "reschedule%3A+done" in r.headers["location"]
    job = await env.scheduler.get_job(job_id)
    assert (
        job is not None
        and job.run_at == datetime(2031, 1, 2, 8, 0, tzinfo=UTC)
        and job.tz == "Europe/Berlin"
    )


async def test_a_bad_time_names_the_field_and_changes_nothing(env: Env) -> None:
    job_id = await env.scheduler.schedule_in("pay.report", timedelta(hours=1))
    before = (await env.scheduler.get_job(job_id)).run_at  # type: ignore[union-attr]
    token = await _csrf(env, job_id)
    r = await env.client.post(
        f"/jobs/{job_id}/reschedule", data={"csrf": token, "run_at": "next tuesday"}, headers=ORIGIN
    )
    assert r.status_code == 400 and "run_at must be an ISO 8601 time" in r.text
    assert (await env.scheduler.get_job(job_id)).run_at == before  # type: ignore[union-attr]


async def test_a_form_without_the_csrf_token_is_refused(env: Env) -> None:
    job_id = await env.scheduler.schedule_in("pay.report", timedelta(hours=1))
    await _csrf(env, job_id)
    r = await env.client.post(
        f"/jobs/{job_id}/cancel", data={"csrf": "not-the-cookie"}, headers=ORIGIN
    )
    assert r.status_code == 403 and "CSRF" in r.text
    assert (await env.scheduler.get_job(job_id)).state.value == "scheduled"  # type: ignore[union-attr]
