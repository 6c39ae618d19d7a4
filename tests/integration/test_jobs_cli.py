"""`horae jobs list|show|stats|cancel|retry|delete|reschedule`, `horae workers list`,
`horae cron show` and `horae audit failures` against real Redis and PostgreSQL (the test's own
namespace and database):
--json is one document with stable names (datetimes ISO 8601 UTC, tracebacks as lists of lines),
tables are whole when piped, a completed job's earlier error says so, and every id gets one line."""

from __future__ import annotations

import asyncio
import json
import os
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from click.testing import CliRunner

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState
from scheduler.cli.main import cli
from scheduler.worker.advertise import horae_version
from tests.integration.engine_fixtures import audited_scheduler, eventually, in_state

LONG = "t.later." + "x" * 150  # a topic wider than any terminal: a piped table must not cut it
FIXED_1S = {"attempts": 2, "backoff": {"type": "fixed", "delay": 1_000}}
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def horae(
    redis_url: str, database_url: str, namespace: str, *args: str
) -> tuple[int, str, list[str]]:
    """Exit code, stdout, and stderr's lines that are not log records. Fails on an escaped exception
    (which a real run would print as a traceback)."""
    result = CliRunner().invoke(
        cli,
        ["--redis-url", redis_url, "--database-url", database_url, "--namespace", namespace, *args],
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    errors = [line for line in result.stderr.splitlines() if not LOG_LINE.match(line)]
    return result.exit_code, result.stdout, errors


def _registry() -> ListenerRegistry:
    reg = ListenerRegistry()

    @reg.on_event("t.flaky")
    async def flaky(event: ScheduleArrivedEvent) -> None:
        if event.attempt == 1:
            raise KeyError("first attempt fails")

    @reg.on_event("t.bad")
    async def bad(event: ScheduleArrivedEvent) -> None:
        raise ValueError("always fails")

    @reg.on_event(LONG)
    async def later(event: ScheduleArrivedEvent) -> None:
        pass

    return reg


async def test_jobs_commands(redis_url: str, database_url: str, namespace: str) -> None:
    def run(*args: str) -> Any:
        return asyncio.to_thread(horae, redis_url, database_url, namespace, *args)

    async with audited_scheduler(redis_url, database_url, namespace, _registry(), None) as s:
        flaky = await s.schedule_in("t.flaky", 0, retry=FIXED_1S)
        bad = await s.schedule_in("t.bad", 0, retry={"attempts": 1})
        later = await s.schedule_in(LONG, "1h", payload={"n": 1})
        worker_pid = os.getpid()
        async with s.worker(concurrency=3) as w:
            await eventually(
                lambda: in_state(s, flaky, JobState.COMPLETED), timeout=20, what="flaky completed"
            )
            await eventually(lambda: in_state(s, bad, JobState.FAILED), what="bad failed")
            code, out, err = await run("workers", "list", "--json")
            assert code == 0, err
            listed = json.loads(out)
            assert listed["cursor"] is None, listed
            [entry] = listed["items"]
            assert entry["id"] == w.id and entry["pid"] == worker_pid and entry["concurrency"] == 3
            assert (
                sorted(entry["topics"]) == sorted(["t.flaky", "t.bad", LONG])
                and entry["all_topics"] is False
            )
            assert set(entry) == {
                "id",
                "host",
                "pid",
                "topics",
                "concurrency",
                "running",
                "last_heartbeat",
                "all_topics",
                "state",
                "drain_requested_at",
                "version",
            }
            assert (entry["state"], entry["drain_requested_at"]) == ("running", None)
            assert entry["version"] == horae_version() and entry["version"], entry
            assert entry["last_heartbeat"].endswith("Z") and datetime.fromisoformat(
                entry["last_heartbeat"]
            )
            code, table, _ = await run("workers", "list")
            assert code == 0 and w.id in table and f" {worker_pid} " in table
            # the old `horae workers [--json]` (kept one release): the same output, a warning
            for args in (["--json"], []):
                code, old, err = await run("workers", *args)
                assert code == 0, err
                if args:
                    assert [e["id"] for e in json.loads(old)["items"]] == [w.id], old
                else:
                    assert w.id in old and f" {worker_pid} " in old, old
                assert err == [
                    f"Warning: `horae workers{' --json' if args else ''}` is deprecated and will "
                    "be removed in the next release; use `horae workers list`"
                ], err
        await s.audit.flush(timeout=10)
        await s.schedule_cron(
            "nightly", "30 3 * * *", topic="t.flaky", tz="Europe/Berlin", payload={"b": 1}
        )

    # list: pages with a cursor, a state filter, the table whole when piped
    code, out, err = await run("jobs", "list", "--json", "--limit", "2")
    assert code == 0, err
    page = json.loads(out)
    assert set(page) == {"items", "cursor"} and len(page["items"]) == 2 and page["cursor"]
    code, out, _ = await run("jobs", "list", "--json", "--limit", "2", "--cursor", page["cursor"])
    rest = json.loads(out)
    assert {j["id"] for j in page["items"] + rest["items"]} == {flaky, bad, later} and rest[
        "cursor"
    ] is None
    assert page["items"][0]["id"] == later and page["items"][0]["state"] == "scheduled"
    assert page["items"][0]["run_at"].endswith("Z") and page["items"][0]["payload"] == {"n": 1}
    code, out, _ = await run("jobs", "list", "--state", "failed", "--json")
    assert [j["id"] for j in json.loads(out)["items"]] == [bad]
    code, out, _ = await run("jobs", "list", "--limit", "1")
    assert code == 0 and any(LONG in line and later in line for line in out.splitlines()), out
    assert "next page: --cursor " in out

    # show: the earlier attempt's error says so; tracebacks are lines, in text and in JSON
    code, out, err = await run("jobs", "show", flaky, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["state"] == "completed" and doc["last_error"]["type"] == "KeyError"
    assert doc["last_error_superseded"] is True and doc["last_error_attempt"] == 1
    assert (
        isinstance(doc["last_error"]["traceback"], list) and len(doc["last_error"]["traceback"]) > 1
    )
    assert not any("\n" in line for line in doc["last_error"]["traceback"])
    assert [(a["attempt"], a["outcome"]) for a in doc["audit_attempts"]] == [
        (1, "failed"),
        (2, "succeeded"),
    ]
    code, out, _ = await run("jobs", "show", flaky)
    assert code == 0 and "last_error (from attempt 1, before the job completed)" in out, out
    assert "\\n" not in out and any('  File "' in line for line in out.splitlines()), out
    code, out, _ = await run("jobs", "show", bad)
    assert (
        code == 0
        and "last_error " in out
        and "before the job completed" not in out
        and "always fails" in out
    )
    assert (
        json.loads((await run("jobs", "show", bad, "--json"))[1])["last_error_superseded"] is False
    )

    # stats
    code, out, _ = await run("jobs", "stats", "--json")
    stats = json.loads(out)
    assert (stats["completed"], stats["failed"], stats["scheduled"]) == (1, 1, 1)

    # cancel / retry / delete: one line per id, an unknown id one clean error line, exit 1
    code, out, err = await run("jobs", "cancel", later, "nope")
    assert (
        code == 1
        and out == f"{later}: cancelled\n"
        and err == [f"Error: no job 'nope' in namespace '{namespace}'"]
    )
    code, out, err = await run("jobs", "cancel", later)
    assert code == 1 and out == "" and len(err) == 1 and "not cancelled: it is cancelled" in err[0]
    code, out, err = await run("jobs", "retry", bad, flaky, "--json")
    assert code == 1 and json.loads(out) == {
        "results": [
            {"id": bad, "changed": True, "state": "scheduled", "error": None},
            {
                "id": flaky,
                "changed": False,
                "state": "completed",
                "error": json.loads(out)["results"][1]["error"],
            },
        ]
    }
    assert "only a failed or cancelled job can be retried" in json.loads(out)["results"][1]["error"]
    code, out, err = await run("jobs", "delete", later)
    assert code == 0 and out == f"{later}: deleted\n" and err == []
    code, out, err = await run("jobs", "show", later)
    assert (
        code == 1 and out == "" and err == [f"Error: no job '{later}' in namespace '{namespace}'"]
    )

    # reschedule: a delay or an ISO time in a zone; refused for a finished job; a bad WHEN is usage
    code, out, err = await run("jobs", "reschedule", bad, "2h", "--json")
    assert code == 0, err
    moved = json.loads(out)
    due = datetime.fromisoformat(moved["run_at"])
    assert abs(due - (datetime.now(UTC) + timedelta(hours=2))) < timedelta(minutes=1)
    code, out, _ = await run(
        "jobs", "reschedule", bad, "2030-01-05T09:00", "--tz", "Europe/Berlin", "--json"
    )
    assert code == 0 and json.loads(out) == {
        "id": bad,
        "changed": True,
        "run_at": "2030-01-05T08:00:00.000Z",
        "tz": "Europe/Berlin",
    }
    code, out, _ = await run("jobs", "reschedule", bad, "2030-01-05T09:00", "--tz", "Europe/Berlin")
    assert code == 0 and out.startswith(
        f"{bad}: rescheduled to 2030-01-05T08:00:00.000Z (2030-01-05 09:00:00 CET)"
    )
    code, _, err = await run("jobs", "reschedule", flaky, "2h")
    assert code == 1 and len(err) == 1 and "not rescheduled: it is completed" in err[0]
    code, _, err = await run("jobs", "reschedule", bad, "soonish")
    assert code == 2 and len(err) == 1 and err[0].startswith("Error: WHEN must be an ISO datetime")

    # cron show
    code, out, _ = await run("cron", "show", "nightly", "--json")
    cron = json.loads(out)
    assert code == 0 and (cron["name"], cron["cron"], cron["tz"], cron["topic"]) == (
        "nightly",
        "30 3 * * *",
        "Europe/Berlin",
        "t.flaky",
    )
    assert cron["next_run_at"].endswith("Z") and cron["payload"] == {"b": 1}
    code, out, _ = await run("cron", "show", "nightly")
    assert code == 0 and "03:30:00 CE" in out and "Europe/Berlin" in out
    code, _, err = await run("cron", "show", "nope")
    assert code == 1 and err == [f"Error: no cron schedule named 'nope' in namespace '{namespace}'"]
    code, out, _ = await run("cron", "list", "--json")
    assert json.loads(out)["cursor"] is None and [c["name"] for c in json.loads(out)["items"]] == [
        "nightly"
    ]

    # audit failures: the job that failed for good, newest first; --topic and --since filter
    code, out, err = await run("audit", "failures", "--json")
    assert code == 0, err
    [row] = json.loads(out)["items"]
    assert (
        row["id"] == bad
        and row["status"] == "failed"
        and row["last_error"]["message"] == "always fails"
    )
    assert isinstance(row["last_error"]["traceback"], list) and row["failed_at"].endswith("Z")
    assert (
        json.loads((await run("audit", "failures", "--json", "--topic", "t.flaky"))[1])["items"]
        == []
    )
    assert [
        r["id"]
        for r in json.loads((await run("audit", "failures", "--json", "--since", "1h"))[1])["items"]
    ] == [bad]
    assert (
        json.loads((await run("audit", "failures", "--json", "--since", "2099-01-01T00:00"))[1])[
            "items"
        ]
        == []
    )
    code, out, _ = await run("audit", "failures")
    assert code == 0 and bad in out and "ValueError: always fails" in out
