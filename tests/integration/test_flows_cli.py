"""`horae jobs flow ROOT_ID` and `horae jobs show` of a flow's node, against real Redis (the
test's own namespace): the tree with each job's topic, state and shortened result, whole when
piped; --json is FlowNode.as_dict, the document GET /api/v1/flows/{root_id} answers; an id
that is no flow's root is one error line naming the root to ask for instead."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from console.app import create_app
from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import Flow, JobState
from tests.integration.engine_fixtures import audited_scheduler, eventually, in_state
from tests.integration.test_jobs_cli import horae

LONG = {"rows": list(range(40))}  # a result longer than a tree row shows


def _registry() -> ListenerRegistry:
    reg = ListenerRegistry()

    @reg.on_event("fl.leaf")
    async def leaf(event: ScheduleArrivedEvent) -> Any:
        return event.payload

    @reg.on_event("fl.sum")
    async def total(event: ScheduleArrivedEvent) -> Any:
        return len(event.children_results)

    return reg


async def test_jobs_flow_prints_the_tree_and_json_and_show_names_the_root(
    redis_url: str, database_url: str, namespace: str
) -> None:
    def run(*args: str) -> Any:
        return asyncio.to_thread(horae, redis_url, database_url, namespace, *args)

    async with audited_scheduler(redis_url, database_url, namespace, _registry(), None) as s:
        root = await s.flow(
            Flow(
                "fl.sum",
                job_id="cli-flow/root",
                children=[
                    Flow(
                        "fl.sum",
                        job_id="cli-flow/mid",
                        children=[
                            Flow("fl.leaf", LONG, job_id="cli-flow/a"),
                            Flow("fl.leaf", 2, job_id="cli-flow/b", delay=3600),
                        ],
                    ),
                    Flow("fl.leaf", "ok", job_id="cli-flow/c"),
                ],
            )
        )
        plain = await s.schedule_in("fl.leaf", 3600, job_id="cli-plain")
        after = await s.schedule_in("fl.leaf", 0, after=[plain], job_id="cli-after")
        async with s.worker():
            for done in ("cli-flow/a", "cli-flow/c"):
                await eventually(lambda d=done: in_state(s, d, JobState.COMPLETED), what=done)
        tree = await s.get_flow(root)
        assert tree is not None

        code, out, err = await run("jobs", "flow", root, "--json")
        assert code == 0, err
        doc = json.loads(out)
        assert doc == json.loads(json.dumps(tree.as_dict()))
        assert [doc["state"], doc["children"][0]["state"]] == ["waiting_for_parents"] * 2
        assert doc["children"][0]["children"][0]["result"] == LONG

        code, out, err = await run("jobs", "flow", root)  # piped: every row whole, one line each
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0].startswith("cli-flow/root  fl.sum  waiting_for_parents (1 of 2)"), out
        ids = [line.strip(" │├└─").split()[0] for line in lines[:5]]
        assert ids == [root, "cli-flow/mid", "cli-flow/a", "cli-flow/b", "cli-flow/c"], out
        row = {line.strip(" │├└─").split()[0]: line for line in lines[1:5]}
        assert 'fl.leaf  completed  → {"rows":[0,1,2,' in row["cli-flow/a"], out
        assert row["cli-flow/a"].endswith("…"), out  # shortened: --json has it whole
        assert "scheduled" in row["cli-flow/b"] and "→" not in row["cli-flow/b"], out
        assert row["cli-flow/c"].endswith('completed  → "ok"'), out
        assert lines[-1] == "2 of 5 jobs completed", out

        # the same document over HTTP
        app = create_app(scheduler=s)
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as api:
            r = await api.get("/api/v1/flows/cli-flow%2Froot")
        assert r.status_code == 200 and r.json() == doc, r.text

        # not a root: one line naming what to ask for
        for asked, says in [
            ("cli-flow/mid", "is a node of the flow whose root is 'cli-flow/root': "
             "horae jobs flow cli-flow/root"),
            (plain, "is not part of a flow"),
            ("cli-nope", "no job 'cli-nope' in namespace"),
        ]:  # fmt: skip
            code, out, err = await run("jobs", "flow", asked)
            assert code == 1 and out == "" and len(err) == 1 and says in err[0], (asked, err)

        # show: a node names its root, and its children (the jobs it runs after)
        code, out, err = await run("jobs", "show", "cli-flow/mid")
        assert code == 0, err
        assert "its root is cli-flow/root (the tree: horae jobs flow cli-flow/root)" in out, out
        assert "children (runs after)" in out and "cli-flow/a, cli-flow/b" in out, out
        code, out, _ = await run("jobs", "show", root)
        assert "this job is its root" in out, out
        code, out, _ = await run("jobs", "show", "cli-flow/mid", "--json")
        shown = json.loads(out)
        assert (shown["flow"], shown["parents"]) == (root, ["cli-flow/a", "cli-flow/b"])
        # an after= job: its parents, no flow
        code, out, _ = await run("jobs", "show", after)
        assert "parents" in out and plain in out and "horae jobs flow" not in out, out
        code, out, _ = await run("jobs", "show", after, "--json")
        assert (json.loads(out)["flow"], json.loads(out)["parents"]) == (None, [plain])

        # a job Redis forgot: its id alone, said so
        assert await s.delete("cli-flow/c")
        code, out, err = await run("jobs", "flow", root)
        assert code == 0, err
        assert "cli-flow/c  (no longer in Redis: past retention)" in out, out
        code, out, _ = await run("jobs", "flow", root, "--json")
        assert json.loads(out)["children"][1] == {
            "id": "cli-flow/c",
            "topic": None,
            "state": None,
            "result": None,
            "children": [],
        }
