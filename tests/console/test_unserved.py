"""The overview says which known topics' jobs wait for a worker (issue 33): a line per topic
with the count and since when, in the live part the page refreshes."""

from __future__ import annotations

from datetime import timedelta

from scheduler.worker.advertise import entry_json
from tests.console.conftest import Env


async def test_the_overview_shows_jobs_waiting_for_a_worker_of_a_known_topic(env: Env) -> None:
    s = env.scheduler
    now = s.clock.now_ms()
    await s.store.advertise_worker(
        "gone",
        entry_json(["probe.slow"], 1, 0, False, 1, now, 10_000, host="h"),
        ["probe.slow"],
        now,
        10_000,
        [("probe.slow", "nuslow")],
    )
    await s.store.forget_worker("gone", now)  # its only worker stopped: nobody serves it
    job = await s.schedule_in("probe.slow", timedelta(0))
    page = await env.client.get("/partials/overview")
    assert page.status_code == 200
    assert (
        'data-topic="probe.slow">probe.slow: 1 due jobs waiting for a worker since' in page.text
    ), page.text
    assert "last served" in page.text and "by nuslow" in page.text
    assert (await s.get_job(job)).state.value == "scheduled", (
        "the console's own worker leaves it waiting"
    )
    await s.forget_topic("probe.slow")
    page = await env.client.get("/partials/overview")
    assert "waiting for a worker" not in page.text
