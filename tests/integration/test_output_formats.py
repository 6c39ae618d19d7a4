"""One machine format for every output (issue 30): every `horae` command with a --json option
(enumerated from the click group, so a new one must get a row here) and every GET of /api/v1,
run against a namespace with jobs in several states, a dead letter, a schedule and a live worker.
Each prints one JSON document; a list is {"items": [...], "cursor": ...}; every instant is
RFC 3339 UTC with milliseconds; a traceback is a list of lines without horae's dispatch frames."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any
from urllib.parse import quote

import click
import httpx

from console.app import create_app
from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import Flow, JobState
from scheduler.cli.main import cli
from scheduler.core.topic_options import TopicOptions
from tests.integration.engine_fixtures import audited_scheduler, eventually, in_state
from tests.integration.test_jobs_cli import horae

INSTANT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
LOOKS_LIKE_TIME = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d")
OWN_FRAMES = (
    "listeners/dispatch.py",
    "scheduler/worker/attempt.py",
    "scheduler/worker/process_pool.py",
    "scheduler/worker/process_child.py",
)
# Fields that name an instant (a value of another type there is a format of its own).
INSTANT_KEYS = re.compile(r"(_at|^last_heartbeat|^last_served|^waiting_since|^at)$")


def json_commands(group: click.Group, prefix: str = "") -> set[str]:
    """Every command path that has a --json option (a group that runs on its own included; a
    deprecated command or option, hidden, left out)."""
    out: set[str] = set()
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if command.hidden:
            continue
        if any(
            "--json" in getattr(p, "opts", ()) and not getattr(p, "hidden", False)
            for p in command.params
        ):
            out.add(path)
        if isinstance(command, click.Group):
            out |= json_commands(command, f"{path} ")
    return out


def check_shape(value: Any, where: str, key: str = "") -> None:
    """The format rules, everywhere in one document."""
    if isinstance(value, dict):
        if "items" in value:
            assert set(value) == {"items", "cursor"} and isinstance(value["items"], list), (
                where,
                key,
                value,
            )
            assert value["cursor"] is None or isinstance(value["cursor"], str), (
                where,
                value["cursor"],
            )
        if "traceback" in value and value["traceback"] is not None:
            trace = value["traceback"]
            assert isinstance(trace, list) and all(
                isinstance(t, str) and "\n" not in t for t in trace
            ), (where, trace)
            assert not [t for t in trace if any(f in t for f in OWN_FRAMES)], (
                where,
                "horae's own frames",
                trace,
            )
        for k, v in value.items():
            check_shape(v, where, str(k))
    elif isinstance(value, list):
        for v in value:
            check_shape(v, where, key)
    elif isinstance(value, str):
        if INSTANT_KEYS.search(key) or LOOKS_LIKE_TIME.match(value):
            assert INSTANT.match(value), (
                f"{where}: {key} = {value!r} is not RFC 3339 UTC with milliseconds"
            )
    elif INSTANT_KEYS.search(key):
        assert value is None, f"{where}: {key} = {value!r} is not an instant's text"


def one_document(out: str, where: str) -> Any:
    """The one JSON document `out` holds (one line), its rules checked."""
    assert out.endswith("\n") and out.count("\n") == 1, f"{where}: not one document: {out!r}"
    doc = json.loads(out)
    check_shape(doc, where)
    return doc


def _registry() -> ListenerRegistry:
    reg = ListenerRegistry()

    @reg.on_event("t.ok")
    async def ok(event: ScheduleArrivedEvent) -> None:
        pass

    @reg.on_event("t.bad")
    async def bad(event: ScheduleArrivedEvent) -> None:
        raise ValueError("always fails")

    return reg


# Lists print {"items", "cursor"}: the commands of the contract (and every other list).
LISTS = {
    "jobs list",
    "dlq list",
    "dlq topics",
    "workers list",
    "topics list",
    "cron list",
    "audit failures",
    "topics blocked",
}


async def test_every_json_output_and_api_answer_has_one_format(
    redis_url: str, database_url: str, namespace: str
) -> None:
    def run(*args: str) -> Any:
        return asyncio.to_thread(horae, redis_url, database_url, namespace, *args)

    async with audited_scheduler(redis_url, database_url, namespace, _registry(), None) as s:
        await s.configure_topic("t.bad", TopicOptions(dead_letter="t.bad.dlq"))
        await s.schedule_cron("nightly", "30 3 * * *", topic="t.ok", tz="Europe/Berlin")
        ok = await s.schedule_in("t.ok", 0)
        bad = await s.schedule_in("t.bad", 0, retry={"attempts": 1})
        later = await s.schedule_in("t.ok", "1h")
        doomed = await s.schedule_in("t.ok", "2h")
        flow = await s.flow(Flow("t.ok", children=[Flow("t.ok", payload={"n": 1})]))
        async with s.worker() as w:
            await eventually(lambda: in_state(s, bad, JobState.FAILED), what="bad failed")
            await eventually(lambda: in_state(s, ok, JobState.COMPLETED), what="ok completed")
            await eventually(
                lambda: in_state(s, flow, JobState.COMPLETED), what="the flow completed"
            )
            await s.audit.flush(timeout=10)
            [dead] = (await s.dead_letters("t.bad.dlq")).items

            # every command with --json, in an order where each one's action applies
            args: dict[str, list[str]] = {
                "jobs list": [],
                "jobs show": [bad],
                "jobs flow": [flow],
                "jobs stats": [],
                "jobs reschedule": [later, "3h"],
                "jobs cancel": [doomed],
                "jobs retry": [doomed],
                "jobs delete": [ok],
                "cron list": [],
                "cron show": ["nightly"],
                "topics list": [],
                "topics show": ["t.bad"],
                "topics set": ["t.other", "--concurrency", "2"],
                "topics blocked": ["t.ok"],
                "dlq list": ["t.bad.dlq"],
                "dlq topics": [],
                "workers list": [],
                "audit failures": [],
                "audit show": [bad, "--events"],
            }
            assert json_commands(cli) == set(args), "a command with --json needs a row here"
            docs: dict[str, Any] = {}
            for path, extra in args.items():
                code, out, err = await run(*path.split(), *extra, "--json")
                assert code == 0, (path, out, err)
                docs[path] = one_document(out, f"horae {path} --json")
                if path in LISTS:
                    assert set(docs[path]) == {"items", "cursor"}, (path, docs[path])

            # the tables show instants the same way (cron's extra wall-time column in its zone
            # aside)
            for path, extra in [
                ("jobs list", []),
                ("jobs show", [bad]),
                ("audit show", [bad]),
                ("workers list", []),
                ("dlq list", ["t.bad.dlq"]),
                ("audit failures", []),
                ("topics list", []),
            ]:
                code, out, err = await run(*path.split(), *extra)
                assert code == 0, (path, out, err)
                stamps = re.findall(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d[^\s│┃]*", out)
                assert stamps and all(INSTANT.match(t) for t in stamps), (path, stamps)
            code, out, _ = await run("audit", "show", bad)
            assert "ValueError: always fails" in out and "\\n" not in out, (
                out
            )  # rendered as jobs show renders it

            shown = docs["audit show"]
            assert shown["job"]["id"] == bad and [a["outcome"] for a in shown["attempts"]] == [
                "failed"
            ], shown
            assert shown["job"]["last_error"] == docs["jobs show"]["last_error"], shown
            assert [e["type"] for e in shown["events"]][-1] == "schedule.failed", shown["events"]
            trace = docs["jobs show"]["last_error"]["traceback"]
            assert any("always fails" in line for line in trace) and any(
                "test_output_formats" in line for line in trace
            ), trace
            assert (docs["jobs stats"]["dead_letter"], docs["jobs stats"]["scheduled"]) == (1, 2), (
                docs["jobs stats"]
            )
            assert docs["dlq topics"]["items"] == [{"topic": "t.bad.dlq", "count": 1}]
            assert [d["id"] for d in docs["dlq list"]["items"]] == [dead.id]
            assert [w_["id"] for w_ in docs["workers list"]["items"]] == [w.id]
            topics = [t["name"] for t in docs["topics list"]["items"]]
            assert {"t.ok", "t.bad", "t.bad.dlq"} <= set(topics), topics

            await eventually(
                lambda: in_state(s, doomed, JobState.COMPLETED), what="the retried job completed"
            )

            # every GET of /api/v1, its path parameters filled in
            app = create_app(scheduler=s)
            values = {
                "job_id": bad,
                "root_id": flow,
                "name": "nightly",
                "worker_id": w.id,
                "topic": "t.bad.dlq",
            }
            transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1:8080"
            ) as client:
                paths = sorted(
                    p
                    for p, ops in app.openapi()["paths"].items()
                    if p.startswith("/api/v1/") and "get" in ops
                ) + ["/api/v1/openapi.json"]
                assert {
                    "/api/v1/jobs",
                    "/api/v1/workers",
                    "/api/v1/topics",
                    "/api/v1/stats",
                } <= set(paths)
                api: dict[str, Any] = {}
                for path in paths:
                    url = re.sub(
                        r"\{(\w+)(:path)?\}", lambda m: quote(values[m.group(1)], safe=""), path
                    )
                    r = await client.get(url)
                    assert r.status_code == 200, (path, r.status_code, r.text)
                    if path.endswith("openapi.json"):
                        assert isinstance(r.json(), dict)
                        continue
                    body = r.text if r.text.endswith("\n") else r.text + "\n"
                    api[path] = one_document(body, f"GET {path}")
                    assert not isinstance(api[path], list), (
                        f"GET {path}: a list is {{items, cursor}}"
                    )
                overview = (await client.get("/")).text
            row = re.search(r'<tr data-topic="t\.bad\.dlq">.*?</tr>', overview, re.S)
            assert row and '/dead-letters?topic=t.bad.dlq">1</a>' in row.group(0), overview
            stamp = re.search(r"As of (\S+)", overview)
            assert stamp and INSTANT.match(stamp.group(1)), overview[:500]
            listed = json.loads(
                (await run("topics", "list", "--json"))[1]
            )  # (topics set added t.other since)
            assert (
                [t["name"] for t in api["/api/v1/topics"]["items"]]
                == [t["name"] for t in listed["items"]]
                == ["t.bad", "t.bad.dlq", "t.ok", "t.other"]
            ), "the console lists what the CLI does"
            assert api["/api/v1/stats"]["totals"] == await s.stats()
            assert api["/api/v1/dead-letters"] == docs["dlq topics"], (
                "one format in the CLI and the API"
            )
            api_trace = api["/api/v1/jobs/{job_id}"]["job"]["last_error"]["traceback"]
            assert api_trace == trace, "one traceback shape in the CLI and the API"
