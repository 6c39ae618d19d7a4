"""The job page of a flow's node in Debian's Chromium (Playwright): a flow run part way (a leaf
completed, one retrying, one not due yet, the parents waiting) opened on its middle node lists
the tree from its root, each job with its state badge and a link to its page, this job marked;
following a link opens that job's page, which marks it instead. Light and dark at 1280 and
700 px: no serious axe-core violation, nothing wider than the window (screenshots to
HORAE_SHOTS, when set). A job scheduled after= two of its jobs lists them with their states.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.async_api import Browser

from console.app import create_app
from horae import Backoff, RetryPolicy, ScheduleArrivedEvent, on_event
from scheduler import Flow
from tests.console.axe import ensure_axe
from tests.console.browser import chromium_browser
from tests.console.test_accessibility import violations
from tests.console.test_browser import Shots, served

pytestmark = pytest.mark.horae(raise_errors=False)
FETCH, FLAKY, MERGE = "flowpage.fetch", "flowpage.flaky", "flowpage.merge"
ROOT, MID = "report-2030-01", "report-2030-01/merge"
EXPECTED = {  # job id -> its state once the clock moved a minute
    ROOT: "waiting_for_parents",
    MID: "waiting_for_parents",
    "report-2030-01/fetch-eu": "completed",
    "report-2030-01/fetch-us": "retrying",
    "report-2030-01/fetch-apac": "scheduled",
    "report-2030-01/check": "completed",
}


@on_event(FETCH)
async def fetch(event: ScheduleArrivedEvent) -> Any:
    return event.payload


@on_event(FLAKY)
async def flaky(event: ScheduleArrivedEvent) -> Any:
    raise RuntimeError("upstream timed out")


@on_event(MERGE)
async def merge(event: ScheduleArrivedEvent) -> Any:
    return {"rows": sum(v.get("rows", 0) for v in event.children_results.values() if v)}


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium_browser() as b:
        yield b


def _flow() -> Flow:
    later = RetryPolicy(attempts=3, backoff=Backoff("fixed", delay_ms=600_000))
    return Flow(
        MERGE,
        job_id=ROOT,
        children=[
            Flow(
                MERGE,
                job_id=MID,
                children=[
                    Flow(FETCH, {"region": "eu", "rows": 1200}, job_id=f"{ROOT}/fetch-eu"),
                    Flow(FLAKY, {"region": "us"}, job_id=f"{ROOT}/fetch-us", retry=later),
                    Flow(FETCH, {"region": "apac"}, job_id=f"{ROOT}/fetch-apac", delay=3600),
                ],
            ),
            Flow(FETCH, "ok", job_id=f"{ROOT}/check"),
        ],
    )


async def test_a_mid_nodes_page_shows_its_flow_with_states_and_links(
    horae: Any, horae_clock: Any, browser: Browser, tmp_path: Path
) -> None:
    assert await horae.flow(_flow()) == ROOT
    await horae_clock.advance("1m")
    await horae.audit.flush()
    tree = await horae.get_flow(ROOT)
    assert tree is not None and {n.id: n.state.value for n in tree.nodes()} == EXPECTED
    mail = await horae.schedule_in(  # a job after two of the flow's: one done, one not yet
        FETCH, 0, after=[f"{ROOT}/fetch-eu", f"{ROOT}/fetch-apac"], job_id="report-2030-01-mail"
    )
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
                await page.goto(f"{url}/jobs/{quote(MID, safe='')}")
                flow = page.locator("#flow")
                heading = await flow.locator("h2").inner_text()
                assert heading.startswith("Flow") and "6 jobs" in heading, heading
                rows = flow.locator("#flow-tree li[data-job]")
                assert await rows.count() == len(EXPECTED)
                shown: dict[str, str] = {}
                for i in range(await rows.count()):
                    row = rows.nth(i)
                    job_id = await row.get_attribute("data-job") or ""
                    link = row.locator(":scope > .node > a")
                    assert await link.inner_text() == job_id
                    assert await link.get_attribute("href") == f"/jobs/{quote(job_id, safe='')}"
                    badge = row.locator(":scope > .node > .state")
                    shown[job_id] = await badge.inner_text()
                    assert await badge.is_visible()
                assert shown == EXPECTED
                # the tree's shape: the root, its two children, the mid node's three
                assert await flow.locator("#flow-tree > li").get_attribute("data-job") == ROOT
                under_mid = flow.locator(f'li[data-job="{MID}"] > ul > li')
                assert await under_mid.count() == 3
                current = flow.locator("li.current")
                assert await current.get_attribute("data-job") == MID
                assert await current.locator(":scope > .node > a[aria-current=page]").count() == 1
                assert "this job" in await current.locator(":scope > .node").inner_text()
                eu = flow.locator(f'li[data-job="{ROOT}/fetch-eu"] > .node')
                assert '→ {"region":"eu","rows":1200}' in await eu.inner_text()
                overflow = await page.evaluate(
                    "document.documentElement.scrollWidth - window.innerWidth"
                )
                assert overflow <= 0, (scheme, width, overflow)
                if found := await violations(page, axe):
                    problems[f"{scheme} {width}"] = found
                await flow.scroll_into_view_if_needed()
                await shots.take(page, f"flow-mid-{width}-{scheme}")
                # a link opens that job's page, which marks it instead
                await flow.get_by_role("link", name=f"{ROOT}/fetch-us").click()
                await page.wait_for_url(f"**/jobs/{quote(f'{ROOT}/fetch-us', safe='')}")
                assert await page.locator("#job-state").inner_text() == "retrying"
                assert await page.locator("#flow li.current").get_attribute("data-job") == (
                    f"{ROOT}/fetch-us"
                )
                # an after= job: its parents with their states and links
                await page.goto(f"{url}/jobs/{quote(mail, safe='')}")
                parents = page.locator("#parents li")
                assert await parents.count() == 2
                assert [await p.inner_text() for p in await parents.all()] == [
                    f"{ROOT}/fetch-eu completed {FETCH}",
                    f"{ROOT}/fetch-apac scheduled {FETCH}",
                ]
                heading = page.get_by_role("heading", name="Parents (waiting for 1 of 2)")
                assert await heading.count() == 1
                if found := await violations(page, axe):
                    problems[f"after= {scheme} {width}"] = found
                await shots.take(page, f"after-parents-{width}-{scheme}")
                assert errors == []
                await ctx.close()
    assert problems == {}, problems
