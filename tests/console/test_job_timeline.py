"""The job page's attempt timeline and its live part, in Debian's Chromium (Playwright): a job
that failed twice and then completed drawn as scheduled → three attempts with the two retry waits
between them → completed, each part labelled, with each attempt's progress and log lines under
it, light and dark at 1280 and 700 px (screenshots to HORAE_SHOTS, when set) with no serious
axe-core violation; a running job's progress, state and timeline updating without a reload, the
refresh pausing while the tab is hidden and stopping once the job has ended."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.async_api import Browser, Page

from console.app import create_app
from horae import Backoff, RetryPolicy, ScheduleArrivedEvent, on_event
from tests.console.axe import ensure_axe
from tests.console.browser import chromium_browser
from tests.console.test_accessibility import violations
from tests.console.test_browser import Shots, served

pytestmark = pytest.mark.horae(raise_errors=False)
FLAKY, SLOW = "timeline.flaky", "timeline.slow"
INSTANT = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
# The running job's listener waits on these (set by the test, in its loop).
GATES: dict[str, asyncio.Event] = {}
CLOCK: dict[str, Any] = {}


@on_event(FLAKY)
async def flaky(event: ScheduleArrivedEvent) -> None:
    """Takes 400 ms (of the test's clock), reports as it goes, fails its first two attempts."""
    await event.log(f"attempt {event.attempt}: charging card for order 7")
    await event.progress(50, f"attempt {event.attempt}: card checked")
    CLOCK["clock"].advance(0.4)
    if event.attempt <= 2:
        await event.log("the bank said no")
        raise RuntimeError(f"card declined on attempt {event.attempt}")
    await event.log("charged 12.00 EUR")
    await event.progress(100, "charged")


@on_event(SLOW)
async def slow(event: ScheduleArrivedEvent) -> None:
    """Reports 10%, waits for the test, reports 60% and a line, waits again, and completes."""
    await event.progress(10, "rendering page 1 of 10")
    await event.log("started rendering")
    await GATES["halfway"].wait()
    CLOCK["clock"].advance(3)
    await event.progress(60, "rendering page 6 of 10")
    await event.log("page 6 rendered")
    await GATES["finish"].wait()
    CLOCK["clock"].advance(2)


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium_browser() as b:
        yield b


async def until(page: Page, expression: str, timeout: float = 15) -> None:
    """Poll `expression` in the page until it is true (wait_for_function would evaluate it with
    eval, which the console's CSP refuses: the test keeps the CSP on)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await page.evaluate(expression):
        assert loop.time() < deadline, f"not within {timeout} s: {expression}"
        await asyncio.sleep(0.1)


async def spans(page: Page) -> list[dict[str, str | None]]:
    """Each part of the timeline as the page draws it: its data attributes and its texts."""
    found: list[dict[str, str | None]] = await page.eval_on_selector_all(
        "svg.timeline g.tl-span",
        """groups => groups.map(g => ({
            kind: g.dataset.kind, status: g.dataset.status, attempt: g.dataset.attempt || null,
            label: g.querySelector('.tl-label').textContent,
            says: g.querySelector('.tl-text').textContent,
            title: g.querySelector('title').textContent,
        }))""",
    )
    return found


async def test_a_job_that_failed_twice_then_completed_is_drawn_attempt_by_attempt(
    horae: Any, horae_clock: Any, browser: Browser, tmp_path: Path
) -> None:
    CLOCK["clock"] = horae.clock
    job_id = await horae.schedule_in(
        FLAKY,
        timedelta(seconds=2),
        payload={"order": 7},
        retry=RetryPolicy(attempts=3, backoff=Backoff("exponential", delay_ms=1000)),
        job_id="order-7/charge",
    )
    await horae_clock.advance("30s")
    await horae.audit.flush()
    assert (await horae.get_job(job_id)).state.value == "completed"  # type: ignore[union-attr]
    axe = ensure_axe()
    shots = Shots(tmp_path)
    problems: dict[str, Any] = {}
    async with served(create_app(scheduler=horae)) as url:
        for scheme in ("light", "dark"):
            for width in (1280, 700):
                ctx = await browser.new_context(
                    viewport={"width": width, "height": 900},
                    color_scheme=scheme,  # type: ignore[arg-type]
                    bypass_csp=True,  # (axe is injected as a script the console's CSP refuses)
                )
                page = await ctx.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
                await page.goto(f"{url}/jobs/{quote(job_id, safe='')}")
                drawn = await spans(page)
                assert [(s["kind"], s["status"], s["attempt"]) for s in drawn] == [
                    ("scheduled", "scheduled", None),
                    ("attempt", "failed", "1"),
                    ("retry_wait", "waited", "2"),
                    ("attempt", "failed", "2"),
                    ("retry_wait", "waited", "3"),
                    ("attempt", "succeeded", "3"),
                    ("terminal", "completed", None),
                ]
                assert [s["label"] for s in drawn] == [
                    "scheduled",
                    "attempt 1",
                    "retry wait",
                    "attempt 2",
                    "retry wait",
                    "attempt 3",
                    "completed",
                ]
                assert [s["says"] for s in drawn[:6]] == [
                    "due 2.00 s after scheduling",
                    "failed · 400 ms",
                    "1.00 s",  # exponential backoff: 1 s, then 2 s
                    "failed · 400 ms",
                    "2.00 s",
                    "succeeded · 400 ms",
                ]
                assert re.fullmatch(r"at \d\d:\d\d:\d\d\.\d{3}Z", drawn[6]["says"] or "")
                assert re.fullmatch(
                    f"attempt 2 failed: started {INSTANT}, ended {INSTANT}, 400 ms",
                    drawn[3]["title"] or "",
                )
                chart = page.get_by_role("img", name=f"Attempt timeline of job {job_id}")
                assert await chart.count() == 1
                desc = await page.locator("svg.timeline desc").text_content() or ""
                assert "attempt 1 failed" in desc and "waited 2.00 s" in desc
                assert "completed at" in desc
                # each attempt's progress and log lines under it
                for n, (percent, lines) in enumerate(
                    [
                        ("50%", ["charging card for order 7", "the bank said no"]),
                        ("50%", ["charging card for order 7", "the bank said no"]),
                        ("100%", ["charging card for order 7", "charged 12.00 EUR"]),
                    ],
                    start=1,
                ):
                    under = page.locator(f"#attempts tr.reported[data-attempt='{n}']")
                    text = await under.inner_text()
                    assert percent in text and all(line in text for line in lines), (n, text)
                outcomes = await page.locator(
                    "#attempts tr.attempt td:nth-child(6)"
                ).all_inner_texts()
                assert outcomes == ["failed", "failed", "succeeded"]
                # an ended job: no refresh, the indicator says so
                assert await page.locator("#job-live[data-refresh]").count() == 0
                status = await page.locator("#live-status").inner_text()
                assert re.fullmatch(f"final state · as of {INSTANT}", status.strip()), status
                overflow = await page.evaluate(
                    "document.documentElement.scrollWidth - window.innerWidth"
                )
                assert overflow <= 0, (scheme, width, overflow)
                # the legend's items side by side, none drawn over the next (a stylesheet's
                # `.key` of another page once squeezed them to a 12 px swatch)
                crowded = await page.evaluate(
                    """[...document.querySelectorAll('#job-live .key')]
                        .map(k => [k.getBoundingClientRect(), k.scrollWidth, k.clientWidth])
                        .filter(([r, sw, cw], i, all) => sw > cw + 1 || (i > 0
                            && Math.abs(all[i - 1][0].top - r.top) < 2
                            && all[i - 1][0].right > r.left + 1)).length"""
                )
                assert crowded == 0, (scheme, width, crowded)
                if found := await violations(page, axe):
                    problems[f"{scheme} {width}"] = found
                await shots.take(page, f"job-timeline-{width}-{scheme}")
                assert errors == []
                await ctx.close()
    assert problems == {}, problems


async def test_a_running_jobs_progress_and_end_appear_without_a_reload(
    horae: Any, horae_clock: Any, browser: Browser, tmp_path: Path
) -> None:
    CLOCK["clock"] = horae.clock
    GATES.update(halfway=asyncio.Event(), finish=asyncio.Event())
    job_id = await horae.schedule_in(SLOW, timedelta(0), payload={"pages": 10})
    running = asyncio.create_task(horae_clock.run_until_idle())
    try:
        for _ in range(500):
            job = await horae.get_job(job_id)
            if job is not None and job.progress is not None:
                break
            await asyncio.sleep(0.01)
        await horae.audit.flush()
        shots = Shots(tmp_path)
        async with served(create_app(scheduler=horae)) as url:
            ctx = await browser.new_context(viewport={"width": 1280, "height": 900})
            page = await ctx.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            fetched: list[str] = []
            page.on(
                "request", lambda r: fetched.append(r.url) if "/partials/jobs/" in r.url else None
            )
            await page.goto(f"{url}/jobs/{quote(job_id, safe='')}")
            assert await page.locator("#job-state").inner_text() == "running"
            assert "10%" in await page.locator("#job-progress").inner_text()
            status = page.locator("#live-status")
            assert "live" in await status.inner_text()
            first_update = await status.locator("time").get_attribute("datetime")
            assert first_update and re.fullmatch(INSTANT, first_update)
            assert await page.locator("#job-live[data-refresh][data-every='2000']").count() == 1
            drawn = await spans(page)
            assert [(s["kind"], s["status"]) for s in drawn] == [
                ("scheduled", "scheduled"),
                ("attempt", "running"),
            ]
            assert await page.locator("svg.timeline .tl-now").count() == 1
            await page.evaluate("window.__notReloaded = true")

            assert await page.locator("#live-announce").text_content() == ""
            GATES["halfway"].set()  # the listener reports 60% and a log line
            await until(page, "document.querySelector('#job-progress').textContent.includes('60%')")
            assert (
                await page.locator("#live-announce").text_content()
                == f"Job {job_id}: running, 60% done"
            )
            assert "rendering page 6 of 10" in await page.locator("#job-progress").inner_text()
            reported = await page.locator("#attempts tr.reported[data-attempt='1']").inner_text()
            assert "page 6 rendered" in reported and "started rendering" in reported
            says = (await spans(page))[1]["says"]
            assert says == "running · 3.00 s so far", says
            later = await status.locator("time").get_attribute("datetime")
            assert later and re.fullmatch(INSTANT, later) and later > first_update
            await shots.take(page, "job-running-1280-light")

            # hidden: no request; shown again: one at once
            await page.evaluate(
                """() => {
                    Object.defineProperty(document, 'visibilityState',
                        {configurable: true, get: () => window.__vis || 'visible'});
                    window.__vis = 'hidden';
                    document.dispatchEvent(new Event('visibilitychange'));
                }"""
            )
            await asyncio.sleep(0.3)  # (a request already under way may finish)
            before = len(fetched)
            await asyncio.sleep(4.5)
            assert len(fetched) == before, "refreshed while the tab was hidden"
            await page.evaluate(
                "window.__vis = 'visible'; document.dispatchEvent(new Event('visibilitychange'))"
            )
            await page.wait_for_timeout(500)
            assert len(fetched) == before + 1, "no refresh once the tab was shown again"

            GATES["finish"].set()  # the attempt succeeds: the job completes
            await running
            await horae.audit.flush()
            # (until the audit has the attempt's end too)
            await until(page, "!document.querySelector('#job-live').hasAttribute('data-refresh')")
            assert await page.locator("#job-state").inner_text() == "completed"
            assert await page.evaluate("window.__notReloaded") is True
            assert "final state" in await status.inner_text()
            drawn = await spans(page)
            assert [(s["kind"], s["status"]) for s in drawn] == [
                ("scheduled", "scheduled"),
                ("attempt", "succeeded"),
                ("terminal", "completed"),
            ]
            assert await page.locator("svg.timeline .tl-now").count() == 0
            assert await page.locator("#act-cancel").count() == 0  # the actions followed
            # the live region (outside the part) told a screen reader the end
            assert await page.locator("#live-announce[role='status']").count() == 1
            assert await page.locator("#job-live #live-announce").count() == 0
            assert (
                await page.locator("#live-announce").text_content()
                == f"Job {job_id}: completed (final state). Live updates ended."
            )
            ended = len(fetched)
            await asyncio.sleep(4.5)
            assert len(fetched) == ended, "still refreshing an ended job"
            await shots.take(page, "job-completed-live-1280-light")
            assert errors == []
            await ctx.close()
    finally:
        GATES["halfway"].set()
        GATES["finish"].set()
        await running
