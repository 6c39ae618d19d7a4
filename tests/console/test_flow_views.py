"""Flows in the HTTP API and on the job page, over the pytest plugin's time machine (real Redis
and PostgreSQL): GET /api/v1/flows/{root_id} is FlowNode.as_dict, a 404 in the error shape
naming the root for a node below it; a job's document names its flow; the page of a flow's
node lists the tree from its root (each job's state, a link to its page, this job marked,
results escaped), bounded for a large flow and whole for a deep chain; an after= job's page
lists its parents with their states."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from console.app import create_app
from console.family import MAX_ROWS
from horae import ScheduleArrivedEvent, on_event
from scheduler import Flow, chain

pytestmark = pytest.mark.horae(raise_errors=False)
LEAF, SUM = "flows-api.leaf", "flows-api.sum"
MARKUP = "<b>bold</b>"


@on_event(LEAF)
async def leaf(event: ScheduleArrivedEvent) -> Any:
    return event.payload


@on_event(SUM)
async def total(event: ScheduleArrivedEvent) -> Any:
    return sum(v for v in event.children_results.values() if isinstance(v, int))


@pytest.fixture
async def api(horae: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(scheduler=horae), client=("127.0.0.1", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as client:
        yield client


def _error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    error = r.json()["error"]
    assert set(error) == {"code", "message", "field"} and error["code"] == "NOT_FOUND", error
    return str(error["message"])


def _rows(html: str) -> dict[str, str]:
    """The flow tree's rows on a page: job id -> its state."""
    return dict(re.findall(r'<li data-job="([^"]+)" data-state="([^"]+)"', html))


async def test_the_api_answers_the_tree_and_the_page_lists_it(
    horae: Any, horae_clock: Any, api: httpx.AsyncClient
) -> None:
    root = await horae.flow(
        Flow(
            SUM,
            job_id="fl/root",
            children=[
                Flow(
                    SUM,
                    job_id="fl/mid",
                    children=[
                        Flow(LEAF, 1, job_id="fl/a"),
                        Flow(LEAF, 2, job_id="fl/b", delay=3600),
                    ],
                ),
                Flow(LEAF, MARKUP, job_id="fl/c"),
            ],
        )
    )
    await horae_clock.advance("1m")  # a and c run; b is due in an hour
    tree = await horae.get_flow(root)
    assert tree is not None

    r = await api.get("/api/v1/flows/fl%2Froot")
    assert r.status_code == 200, r.text
    assert r.json() == tree.as_dict()
    assert [n["state"] for n in (r.json(), *r.json()["children"])] == [
        "waiting_for_parents",
        "waiting_for_parents",
        "completed",
    ]
    said = _error(await api.get("/api/v1/flows/fl%2Fmid"), 404)
    assert "node of the flow whose root is 'fl/root'" in said and "/api/v1/flows/fl/root" in said
    plain = await horae.schedule_in(LEAF, 3600, job_id="fl-plain")
    assert "not part of a flow" in _error(await api.get(f"/api/v1/flows/{plain}"), 404)
    assert "no job 'fl-none'" in _error(await api.get("/api/v1/flows/fl-none"), 404)
    doc = (await api.get("/api/v1/jobs/fl%2Fmid")).json()
    job = doc["job"]
    assert (job["flow"], job["parents"]) == (root, ["fl/a", "fl/b"])
    # no due time yet: its timeline says it waits (not "due at once")
    assert [(t["kind"], t["status"]) for t in doc["timeline"]] == [
        ("scheduled", "waiting_for_parents")
    ]
    assert (await api.get(f"/api/v1/jobs/{plain}")).json()["job"]["flow"] is None
    schema = (await api.get("/api/v1/openapi.json")).json()
    assert "/api/v1/flows/{root_id}" in schema["paths"]

    page = (await api.get("/jobs/fl%2Fmid")).text
    assert _rows(page) == {
        "fl/root": "waiting_for_parents",
        "fl/mid": "waiting_for_parents",
        "fl/a": "completed",
        "fl/b": "scheduled",
        "fl/c": "completed",
    }
    assert '<li data-job="fl/mid" data-state="waiting_for_parents" class="current">' in page
    assert 'href="/jobs/fl%2Fb"' in page and 'aria-current="page">fl/mid</a>' in page
    assert "waits for 1 of 2" in page and "5 jobs · 2 completed" in page
    assert "waits for the jobs it runs after" in page and "due at once" not in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and MARKUP not in page  # c's result, escaped
    assert '<ul id="parents"' not in page  # (a flow node's parents are the tree's children)

    # an after= job: its parents with their states
    after = await horae.schedule_in(LEAF, 0, after=["fl/a", plain], job_id="fl-after")
    page = (await api.get(f"/jobs/{after}")).text
    parents = re.findall(r'<li data-job="([^"]+)" data-state="([^"]+)"', page)
    assert parents == [("fl/a", "completed"), (plain, "scheduled")], page
    assert "(waiting for 1 of 2)" in page and 'id="flow"' not in page


async def test_a_large_flow_is_bounded_and_a_deep_one_whole(
    horae: Any, api: httpx.AsyncClient
) -> None:
    wide = [Flow(LEAF, i, job_id=f"wide/{i:03}", delay=3600) for i in range(250)]
    root = await horae.flow(Flow(SUM, job_id="wide", children=wide))
    page = (await api.get("/jobs/wide%2F249")).text  # the last leaf: past the bound
    rows = _rows(page)
    assert len(rows) == MAX_ROWS + 1 and "wide/249" in rows and "wide/198" in rows, len(rows)
    assert "… and 50 more" in page and "50 of the flow's 251 jobs are left out" in page
    assert (await api.get(f"/api/v1/flows/{root}")).json()["children"][-1]["id"] == "wide/249"

    steps = [Flow(LEAF, i, job_id=f"deep/{i:03}", delay=3600) for i in range(100)]
    last = await horae.flow(chain(*steps))  # 100 levels
    page = await api.get("/jobs/deep%2F050")
    assert page.status_code == 200 and len(_rows(page.text)) == 100
    doc = (await api.get(f"/api/v1/flows/{last}")).json()
    depth = 0
    while doc["children"]:
        doc, depth = doc["children"][0], depth + 1
    assert (depth, doc["id"]) == (99, "deep/000")


async def test_jobs_redis_forgot_are_marked_and_a_lost_root_is_said(
    horae: Any, horae_clock: Any, api: httpx.AsyncClient
) -> None:
    children = [Flow(LEAF, 1, job_id="gone/a"), Flow(LEAF, 2, job_id="gone/b", delay=3600)]
    mid = Flow(SUM, job_id="gone/mid", children=children)
    root = await horae.flow(Flow(SUM, job_id="gone", children=[mid]))
    await horae_clock.advance("1m")
    assert await horae.delete("gone/a")  # (as retention would: completed, then forgotten)
    doc = (await api.get(f"/api/v1/flows/{root}")).json()
    assert doc["children"][0]["children"][0] == {
        "id": "gone/a",
        "topic": None,
        "state": None,
        "result": None,
        "children": [],
    }
    page = (await api.get("/jobs/gone%2Fmid")).text
    assert _rows(page)["gone/a"] == "past retention" and "1 past retention" in page
    assert await horae.delete(root)
    page = (await api.get("/jobs/gone%2Fmid")).text
    assert "Its root, <a" in page and "is no longer in Redis" in page and not _rows(page)
    assert "no job 'gone'" in _error(await api.get("/api/v1/flows/gone"), 404)
