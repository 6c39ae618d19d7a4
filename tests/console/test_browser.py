"""The console in a real browser (Debian's Chromium driven by Playwright): a failing job
found from the overview in three clicks and replayed, a paused schedule whose next tick
does not run, a viewer who cannot act, markup in payloads and errors shown as text.

The app is served by uvicorn in this test's event loop over the plugin's `horae`
scheduler, whose clock moves only when the test says (`horae_clock`): no sleeps.
Screenshots of every page go to the test's tmp dir (and HORAE_SHOTS, when set)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import uvicorn
from playwright.async_api import Browser, Page, async_playwright

from console.app import create_app
from console.auth import Principal, Role
from horae import ScheduleArrivedEvent, TopicOptions, on_event
from tests.console.browser import CLIPPED_ACTIONS, LAUNCH_ARGS, ensure_chromium
from tests.console.conftest import XSS_PAYLOAD

pytestmark = pytest.mark.horae(raise_errors=False)
PAY, TICK, DLQ = "console.pay", "console.tick", "console.pay.dead"
FAILED_ONCE: set[str] = set()


@on_event(PAY)
async def pay(event: ScheduleArrivedEvent) -> None:
    """Fails the first run of a job whose payload asks for it, with markup in the message."""
    if (event.payload or {}).get("fail_first") and event.scheduled_job_id not in FAILED_ONCE:
        FAILED_ONCE.add(event.scheduled_job_id)
        raise RuntimeError(f"card declined {XSS_PAYLOAD}")


@on_event(TICK)
async def tick(event: ScheduleArrivedEvent) -> None:
    return None


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    path = ensure_chromium()
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=str(path), headless=True, args=LAUNCH_ARGS)
        yield b
        await b.close()


@asynccontextmanager
async def served(app: object) -> AsyncIterator[str]:
    """Serve `app` on a free loopback port in this event loop; its base URL."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    )
    import asyncio

    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


class Shots:
    """Full-page screenshots under the test's tmp dir (copied to HORAE_SHOTS when set)."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.taken: list[Path] = []

    async def take(self, page: Page, name: str) -> None:
        path = self.where / f"{name}.png"
        await page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 5_000, f"{name}: a blank screenshot?"
        self.taken.append(path)
        if os.environ.get("HORAE_SHOTS"):
            Path(os.environ["HORAE_SHOTS"]).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(os.environ["HORAE_SHOTS"]) / path.name)


async def open_page(browser: Browser, **context: object) -> Page:
    ctx = await browser.new_context(viewport={"width": 1360, "height": 900}, **context)
    page = await ctx.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the confirmations of the action forms
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors  # type: ignore[attr-defined]
    return page


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write_report(where: Path) -> None:
    """A nightly report's output as `horae report` writes it (summary.json's contract keys)."""
    where.mkdir(parents=True)
    topic = {
        "topic": PAY,
        "jobs": 200,
        "completed": 170,
        "failed": 30,
        "cancelled": 0,
        "failure_rate": 0.15,
        "attempts": 240,
        "failed_attempts": 70,
        "attempt_failure_rate": 0.29,
        "retry_recovery_rate": 0.5,
        "p50_duration_ms": 12.0,
        "p95_duration_ms": 80.0,
        "p95_lateness_ms": 4.0,
    }
    summary = {
        "window": {
            "since": "2030-01-01T00:00:00+00:00",
            "until": "2030-01-02T00:00:00+00:00",
            "zone": "UTC",
        },
        "topics": [topic, {**topic, "topic": TICK, "failed": 0, "failure_rate": 0.0}],
        "top_errors": [
            {
                "signature": f"RuntimeError: card declined {XSS_PAYLOAD}",
                "count": 30,
                "topics": [PAY],
                "example_job_id": "abc",
            }
        ],
        "alerts": [
            {"topic": PAY, "kind": "failure_rate", "failure_rate": 0.15, "baseline_rate": 0.02}
        ],
    }
    (where / "summary.json").write_text(json.dumps(summary))
    (where / "report.html").write_text(
        "<!doctype html><title>report</title><h1>nightly report</h1>"
    )


async def test_a_failing_job_is_found_in_three_clicks_and_replayed(
    horae, horae_clock, browser: Browser, tmp_path: Path
) -> None:
    await horae.configure_topic(PAY, TopicOptions(dead_letter=DLQ))
    for n in range(3):
        await horae.schedule_in(PAY, timedelta(0), payload={"n": n})
    bad = await horae.schedule_in(
        PAY,
        timedelta(0),
        payload={"fail_first": True, "note": XSS_PAYLOAD},
        metadata={"who": XSS_PAYLOAD},
        retry={"attempts": 1},
    )
    await horae.schedule_in(PAY, timedelta(hours=2), payload={"later": True}, key="acct-7")
    await horae_clock.run_until_idle()
    await horae.audit.flush()
    write_report(tmp_path / "reports" / "2030-01-01")
    shots = Shots(tmp_path)
    async with served(create_app(scheduler=horae, report_dir=tmp_path / "reports")) as url:
        page = await open_page(browser)
        await page.goto(url + "/")
        await shots.take(page, "overview")
        await page.click(f"#topics tr[data-topic='{PAY}'] a.bad")  # 1: the topic's failed jobs
        assert await page.locator("#jobs tbody tr").count() == 1
        await shots.take(page, "jobs-failed")
        await page.click(f"#jobs a:text-is('{bad}')")  # 2: the job
        assert await page.locator("#job-state").inner_text() == "failed"
        # markup in the payload, the metadata and the error is text, and none of it ran
        as_json = json.dumps(XSS_PAYLOAD)  # (the payload and metadata are shown as JSON)
        assert as_json in await page.locator("#payload").inner_text()
        assert as_json in await page.locator("#metadata").inner_text()
        assert XSS_PAYLOAD in await page.locator("#last-error").inner_text()
        assert await page.evaluate("window.__pwned") is None
        assert await page.locator("#attempts tbody tr").count() == 1
        await page.click("details summary")  # unfold the traceback
        await shots.take(page, "job-failed")
        await page.click("#act-retry")  # 3: replay it (confirmed)
        assert "retry: done" in await page.locator(".flash").inner_text()
        await horae_clock.run_until_idle()
        await horae.audit.flush()
        await page.reload()
        assert await page.locator("#job-state").inner_text() == "completed"
        outcomes = await page.locator("#attempts tbody tr td:nth-child(6)").all_inner_texts()
        assert outcomes == ["failed", "succeeded"]
        assert [(a.actor, a.action) for a in await horae.audit.actions(bad)] == [("local", "retry")]
        await shots.take(page, "job-replayed")
        assert page.errors == []  # type: ignore[attr-defined]

        for path, name in [
            ("/jobs", "jobs"),
            ("/topics", "topics"),
            ("/analytics", "analytics"),
        ]:
            await page.goto(url + path)
            await shots.take(page, name)
        await page.click("header nav a:text-is('Dead letters')")  # the topics, before any pick
        held = page.locator(f"#dead-letter-topics tr[data-topic='{DLQ}']")
        assert "1 letter" in await held.inner_text()
        await held.locator("a:text-is('Show letters')").click()
        await shots.take(page, "dead-letters")
        assert (
            await page.locator("#dead-letters tbody tr td.mono a").count() == 2
        )  # the letter and its source
        assert (
            "RuntimeError: card declined" in await page.locator("#dead-letters td.err").inner_text()
        )
        await page.locator("#dead-letters button:text-is('Replay')").click()
        assert "replayed as job" in await page.locator(".flash").inner_text()
        assert (await horae.dead_letters(DLQ)).items == []
        await page.goto(url + "/jobs?key=acct-7")
        await shots.take(page, "jobs-by-key")
        assert await page.locator("#jobs tbody tr").count() == 1
        await page.goto(url + "/analytics")
        assert XSS_PAYLOAD in await page.locator("#errors").inner_text()
        assert await page.locator("svg.chart rect").count() == 2
        assert await page.evaluate("window.__pwned") is None


async def test_a_paused_schedule_does_not_tick(
    horae, horae_clock, browser: Browser, tmp_path: Path
) -> None:
    await horae.schedule_cron("console-tick", "*/5 * * * *", topic=TICK, tz="Europe/Paris")
    await horae_clock.advance("10m")
    assert len(await horae.ran(TICK)) == 2  # it ticks while running
    shots = Shots(tmp_path)
    async with served(create_app(scheduler=horae)) as url:
        page = await open_page(browser)
        await page.goto(url + "/crons")
        row = page.locator("#crons tr[data-name='console-tick']")
        assert "completed" in await row.inner_text()  # the last tick's outcome
        assert await row.locator("a.tick.completed").count() == 2  # both ticks, newest first
        await shots.take(page, "crons")
        await row.locator("button.pause").click()
        assert "pause: done" in await page.locator(".flash").inner_text()
        assert await page.locator("#crons tr.paused[data-name='console-tick']").count() == 1
        await horae_clock.advance("30m")
        assert len(await horae.ran(TICK)) == 2  # no tick while paused
        await shots.take(page, "crons-paused")
        await page.locator("#crons tr[data-name='console-tick'] button.resume").click()
        await horae_clock.advance("10m")
        assert len(await horae.ran(TICK)) == 4  # ticks again once resumed
        await page.locator("#crons tr[data-name='console-tick'] button.trigger").click()
        assert "trigger: done" in await page.locator(".flash").inner_text()
        await horae_clock.run_until_idle()
        assert len(await horae.ran(TICK)) == 5
    actions = [(a.action, a.outcome) for a in await horae.audit.actions("console-tick")]
    assert actions == [("cron.trigger", "done"), ("cron.resume", "done"), ("cron.pause", "done")]


async def test_a_viewer_sees_but_cannot_act(
    horae, horae_clock, browser: Browser, tmp_path: Path
) -> None:
    job_id = await horae.schedule_in(PAY, timedelta(hours=1), payload={"n": 1})
    await horae.schedule_cron("console-tick", "*/5 * * * *", topic=TICK)
    console = horae.settings.console.model_copy(
        update={"viewer_token": "v-token", "operator_token": "o-token"}
    )
    app = create_app(horae.settings.model_copy(update={"console": console}), scheduler=horae)
    shots = Shots(tmp_path)
    async with served(app) as url:
        anonymous = await open_page(browser)
        assert (await anonymous.request.get(url + "/")).status == 401
        page = await open_page(
            browser, http_credentials={"username": "vera", "password": "v-token"}
        )
        await page.goto(url + f"/jobs/{job_id}")
        assert "Viewers cannot act" in await page.content()
        assert await page.locator("#act-cancel").count() == 0
        await shots.take(page, "job-as-viewer")
        await page.goto(url + "/crons")
        assert await page.locator("button.pause").count() == 0
        # a hand-made form post with this browser's own valid CSRF token (pages show a viewer
        # none: made here as the console makes it) and Origin is refused all the same
        from console.auth import csrf_token

        nonce = next(c["value"] for c in await page.context.cookies() if c["name"] == "horae_csrf")
        csrf = csrf_token(
            app.state.console.auth, nonce, Principal("vera", Role.VIEWER, _sha256("v-token"))
        )
        forged = await page.request.post(
            url + f"/jobs/{job_id}/cancel", form={"csrf": csrf}, headers={"Origin": url}
        )
        assert forged.status == 403 and "vera is a viewer" in await forged.text()
        operator = await open_page(
            browser, http_credentials={"username": "olga", "password": "o-token"}
        )
        await operator.goto(url + f"/jobs/{job_id}")
        no_token = await operator.request.post(
            url + f"/jobs/{job_id}/cancel", form={"csrf": "guess"}, headers={"Origin": url}
        )
        assert no_token.status == 403 and "CSRF check failed" in await no_token.text()
        await operator.click("#act-cancel")
        assert await operator.locator("#job-state").inner_text() == "cancelled"
    log = [(a.actor, a.role, a.outcome) for a in await horae.audit.actions(job_id)]
    assert log == [("olga", "operator", "done"), ("vera", "viewer", "refused")]


ODD_IDS = [
    "orders/123",
    "100%",
    "with space",
    "what?now",
    "hash#tag",
    "ünï/cødé",
    "a/cancel",
    "x/../y",
]


async def test_ids_with_any_character_are_reached_by_their_links(
    horae, horae_clock, browser: Browser
) -> None:
    """Ids may hold `/` (the library takes them): Chromium follows each job's link from the
    list and cancels it with the page's form; `x/../y` too (encoded: no dot segment for the browser
    to drop)."""
    for job_id in ODD_IDS:
        await horae.schedule_in(PAY, timedelta(hours=1), job_id=job_id)
    async with served(create_app(scheduler=horae)) as url:
        page = await open_page(browser)
        for job_id in ODD_IDS:
            await page.goto(url + "/jobs?state=scheduled")
            await page.get_by_role("link", name=job_id, exact=True).click()
            assert await page.locator("h1 .mono").inner_text() == job_id
            assert await page.locator("#job-state").inner_text() == "scheduled"
            await page.click("#act-cancel")
            assert "cancel: done" in await page.locator(".flash").inner_text(), job_id
            assert await page.locator("#job-state").inner_text() == "cancelled", job_id
        assert page.errors == []  # type: ignore[attr-defined]
    for job_id in ODD_IDS:
        assert (await horae.get_job(job_id)).state.value == "cancelled"  # type: ignore[union-attr]


async def test_a_worker_is_drained_from_the_workers_page(
    horae, horae_clock, browser: Browser, tmp_path: Path
) -> None:
    """Nav → Workers, Drain (confirmed, naming the worker) → the flash, the row draining without its
    button, the action in the audit's log."""
    [worker] = await horae.workers()
    shots = Shots(tmp_path)
    async with served(create_app(scheduler=horae)) as url:
        page = await open_page(browser)
        asked: list[str] = []
        page.on("dialog", lambda dialog: asked.append(dialog.message))
        await page.goto(url + "/")
        await page.click("header nav a:text-is('Workers')")
        row = page.locator(f"#workers tr[data-id='{worker.id}']")
        assert "running" in await row.inner_text()
        await shots.take(page, "workers")
        await page.set_viewport_size({"width": 700, "height": 900})  # Drain still in view
        assert await page.evaluate(CLIPPED_ACTIONS) == []
        await shots.take(page, "workers-700")
        await page.set_viewport_size({"width": 1360, "height": 900})
        await row.locator("button.drain").click()
        assert "drain requested" in await page.locator(".flash").inner_text()
        assert asked and worker.id in asked[0] and "exits" in asked[0]
        assert (
            "draining" in await row.inner_text() and await row.locator("button.drain").count() == 0
        )
        await shots.take(page, "workers-draining")
        assert page.errors == []  # type: ignore[attr-defined]
    assert [w.state for w in await horae.workers()] == ["draining"]
    assert [(a.action, a.outcome) for a in await horae.audit.actions(worker.id)] == [
        ("worker.drain", "done")
    ]
