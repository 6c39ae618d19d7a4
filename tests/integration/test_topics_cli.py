"""`horae topics list|show|set|delete|blocked` against real Redis: set changes only the options
given, --json is one document with stable names, tables are whole when piped, a refused
value or a changed policy is one line with exit 2, a missing topic one line with exit 1."""

from __future__ import annotations

import asyncio
import json

import click
import redis as sync_redis
from click.testing import CliRunner

from listeners import ListenerRegistry
from scheduler import TopicOptions
from scheduler.cli.main import cli
from scheduler.core.keys import Keys
from tests.integration.engine_fixtures import make_scheduler

DLQ = "pay." + "d" * 150  # longer than any terminal: a piped table must not cut it

EXPECTED = {
    "name": "pay",
    "policy": "key_strict_fifo",
    "retry": {
        "attempts": 3,
        "backoff": {"type": "fixed", "delay": 10_000, "max_delay": 3_600_000, "jitter": "full"},
    },
    "timeout_ms": 120_000,
    "rate_limit": {"max": 50, "per_ms": 1_000, "per_key": True},
    "concurrency": 4,
    "priority_default": 1,
    "warning_size": 1_000,
    "dead_letter": DLQ,
}


def horae(
    redis_url: str, database_url: str, namespace: str, *args: str
) -> tuple[int, str, list[str]]:
    """Exit code, stdout, and the lines of stderr that are not log records."""
    result = CliRunner().invoke(
        cli,
        ["--redis-url", redis_url, "--database-url", database_url, "--namespace", namespace, *args],
    )
    errors = [line for line in result.stderr.splitlines() if " INFO " not in line]
    return result.exit_code, result.stdout, errors


def test_topics_commands(redis_url: str, database_url: str, namespace: str) -> None:
    run = lambda *a: horae(redis_url, database_url, namespace, *a)  # noqa: E731
    code, out, err = run(
        "topics",
        "set",
        "pay",
        "--policy",
        "key_strict_fifo",
        "--concurrency",
        "4",
        "--rate-limit",
        "50/1s",
        "--rate-per-key",
        "--timeout",
        "2m",
        "--priority-default",
        "high",
        "--warning-size",
        "1000",
        "--dead-letter",
        DLQ,
        "--retry-attempts",
        "3",
        "--retry-backoff",
        "fixed",
        "--retry-delay",
        "10s",
        "--retry-jitter",
        "full",
        "--json",
    )
    assert code == 0 and json.loads(out) == EXPECTED, (out, err)
    code, out, _ = run("topics", "show", "pay", "--json")
    assert code == 0 and json.loads(out) == EXPECTED
    code, out, _ = run("topics", "set", "other")
    assert code == 0
    code, out, _ = run("topics", "list", "--json")
    listed = json.loads(out)
    assert (
        code == 0
        and listed["cursor"] is None
        and [d["name"] for d in listed["items"]] == ["other", "pay"]
    )
    pay = listed["items"][1]
    assert {k: v for k, v in pay.items() if k in EXPECTED} == EXPECTED and pay[
        "configured"
    ] is True, pay
    assert pay["counts"]["scheduled"] == 0 and pay["counts"]["dead_letter"] == 0, pay
    code, out, _ = run("topics", "list")
    assert code == 0 and any(
        line.count(DLQ) == 1 and "key_strict_fifo" in line and "50/1s per key" in line
        for line in out.splitlines()
    ), out
    code, out, _ = run("topics", "show", "pay")
    assert (
        code == 0
        and any(DLQ in line for line in out.splitlines())
        and "3 attempts, fixed 10s" in out
    )

    # Only the options given change; --unset clears one.
    code, out, _ = run(
        "topics", "set", "pay", "--concurrency", "8", "--unset", "rate_limit", "--json"
    )
    assert code == 0 and json.loads(out) == dict(EXPECTED, concurrency=8, rate_limit=None)
    code, out, _ = run("topics", "set", "pay", "--rate-limit", "5/m", "--json")
    assert code == 0 and json.loads(out)["rate_limit"] == {
        "max": 5,
        "per_ms": 60_000,
        "per_key": False,
    }

    # Refusals: one line, exit 2, nothing stored.
    for args, message in [
        (
            ("--policy", "singleton"),
            "Error: topic 'pay' has policy 'key_strict_fifo'; a topic's policy cannot change",
        ),
        (("--concurrency", "0"), "Error: concurrency must be from 1 to 1,000,000; got 0"),
        (
            ("--concurrency", "x"),
            "Error: Invalid value for '--concurrency': 'x' is not a valid integer.",
        ),
        (("--policy", "fifo"), "Error: Invalid value for '--policy'"),
        (("--rate-limit", "50"), "Error: --rate-limit must be MAX/PER"),
        (("--rate-limit", "50/2d"), "Error: rate_limit.per must be from 1 ms to 86,400,000 ms"),
        (("--timeout", "soon"), "Error: timeout must be a timedelta"),
        (
            ("--priority-default", "urgent"),
            "Error: priority_default must be an integer from -1,000 to 1,000",
        ),
        (("--retry-attempts", "50"), "Error: attempts must be from 1 to 20; got 50"),
        (("--dead-letter", "pay"), "Error: topic 'pay' cannot be its own dead-letter topic"),
        (
            ("--unset", "timeout", "--timeout", "1s"),
            "Error: --unset timeout and a value for it exclude each other",
        ),
    ]:
        code, out, err = run("topics", "set", "pay", *args)
        assert code == 2 and len(err) == 1 and err[0].startswith(message), (args, err)
    code, out, _ = run("topics", "show", "pay", "--json")
    assert json.loads(out) == dict(
        EXPECTED, concurrency=8, rate_limit={"max": 5, "per_ms": 60_000, "per_key": False}
    )
    code, _, err = run("topics", "show", "nope")
    assert code == 1 and err == [
        "Error: no configuration for topic 'nope' in namespace " + repr(namespace)
    ]
    code, _, err = run("topics", "show")
    assert code == 2 and err == ["Error: Missing argument 'NAME'."]


def test_topics_blocked_and_delete(redis_url: str, database_url: str, namespace: str) -> None:
    run = lambda *a: horae(redis_url, database_url, namespace, *a)  # noqa: E731
    client = sync_redis.Redis.from_url(redis_url)
    try:
        client.sadd(Keys(namespace).fifo_blocked("orders"), "k-2", "k-1")
    finally:
        client.close()
    assert run("topics", "blocked", "orders")[:2] == (0, "k-1\nk-2\n")
    assert run("topics", "blocked", "orders", "--json")[:2] == (
        0,
        '{"items": ["k-1", "k-2"], "cursor": null}\n',
    )
    assert run("topics", "blocked", "empty")[:2] == (0, "")

    async def configure_with_a_job() -> None:
        async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
            await s.configure_topic("orders", TopicOptions(concurrency=1))
            await s.schedule_in("orders", "1h")

    asyncio.run(configure_with_a_job())
    code, _, err = run("topics", "delete", "orders")
    assert code == 2 and len(err) == 1 and err[0].endswith("pass --force to delete it anyway"), err
    assert run("topics", "delete", "orders", "--force")[:2] == (
        0,
        "deleted the configuration of topic orders\n",
    )
    code, _, err = run(
        "topics", "delete", "orders", "--force"
    )  # without --force: in use (its job stays)
    assert code == 1 and err == [
        "Error: no configuration for topic 'orders' in namespace " + repr(namespace)
    ]


def test_every_topics_command_has_help() -> None:
    group = cli.commands["topics"]
    assert isinstance(group, click.Group) and group.help
    assert sorted(group.commands) == ["blocked", "delete", "forget", "list", "set", "show"]
    for name, command in group.commands.items():
        assert command.help, name
        result = CliRunner().invoke(cli, ["topics", name, "--help"])
        assert result.exit_code == 0 and command.help.split()[0] in result.stdout, name
        assert all(p.help for p in command.params if isinstance(p, click.Option)), name
