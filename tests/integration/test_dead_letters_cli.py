"""`horae dlq list|replay|delete|purge` against real Redis: ids checked against the topic,
--all and purge ask first (--yes skips), unknown ids fail with one line and exit 1."""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner

from scheduler import TopicOptions
from scheduler.cli.main import cli
from tests.integration.engine_fixtures import eventually, make_scheduler
from tests.integration.test_dead_letters import ONCE, has_dead_letters, registry


def _make_dead_letters(redis_url: str, namespace: str, n: int) -> None:
    async def main() -> None:
        reg, _ = registry()
        async with make_scheduler(redis_url, namespace, reg) as s:
            await s.configure_topic("pay", TopicOptions(dead_letter="pay.dlq"))
            for i in range(n):
                await s.schedule_in("pay", 0, payload={"i": i}, retry=ONCE)
            async with s.worker():
                await eventually(
                    lambda: has_dead_letters(s, "pay.dlq", n), what=f"{n} dead letters"
                )

    asyncio.run(main())


def horae(
    redis_url: str, database_url: str, namespace: str, *args: str, input: str | None = None
) -> tuple[int, str]:
    """Exit code, and stdout (or, on failure, stderr's last line: the error)."""
    result = CliRunner().invoke(
        cli,
        ["--redis-url", redis_url, "--database-url", database_url, "--namespace", namespace, *args],
        input=input,
    )
    if result.exit_code == 0:
        return 0, result.stdout
    return result.exit_code, result.stdout + result.stderr.strip().splitlines()[-1]


def test_dlq_commands(redis_url: str, database_url: str, namespace: str) -> None:
    _make_dead_letters(redis_url, namespace, 5)
    run = lambda *a, input=None: horae(redis_url, database_url, namespace, *a, input=input)  # noqa: E731
    code, out = run("dlq", "list", "pay.dlq", "--json", "--limit", "3")
    assert code == 0, out
    [doc] = [
        json.loads(line) for line in out.splitlines()
    ]  # one document: {"items": [...], "cursor": ...}
    assert len(doc["items"]) == 3 and isinstance(doc["cursor"], str), doc
    ids = [x["id"] for x in doc["items"]]
    assert (
        doc["items"][0]["metadata"]["source_topic"] == "pay"
        and doc["items"][0]["source_topic"] == "pay"
    )
    code, out = run("dlq", "list", "pay.dlq", "--json", "--cursor", doc["cursor"])
    rest = json.loads(out)
    assert code == 0 and len(rest["items"]) == 2 and rest["cursor"] is None, out
    code, out = run("dlq", "topics", "--json")
    assert code == 0 and json.loads(out) == {
        "items": [{"topic": "pay.dlq", "count": 5}],
        "cursor": None,
    }, out
    code, out = run("dlq", "topics")
    assert code == 0 and any("pay.dlq" in line and " 5 " in line for line in out.splitlines()), out
    code, out = run("dlq", "list", "pay.dlq")
    assert code == 0 and ids[0] in out and "ValueError" in out

    code, out = run("dlq", "delete", "pay.dlq", "nope")
    assert code == 1 and out.strip() == "Error: no dead letter 'nope' on topic 'pay.dlq'", out
    code, out = run("dlq", "delete", "pay.dlq", ids[0])
    assert code == 0 and "deleted 1" in out
    code, out = run("dlq", "replay", "pay.dlq", ids[1])
    assert code == 0 and out.startswith(f"{ids[1]} -> ")
    code, out = run("dlq", "delete", "pay.dlq", "--all", input="n\n")
    assert code == 1 and "Delete all 3 dead letters" in out
    code, out = run("dlq", "replay", "pay.dlq", "--all", "--yes")
    assert code == 0 and len(out.splitlines()) == 3
    code, out = run("dlq", "purge", "pay.dlq", input="y\n")
    assert code == 0 and "purged 0" in out
    code, out = run("dlq", "delete", "pay.dlq")
    assert code == 2, "ids or --all"
