"""Fuzzing the `horae` commands that parse input (cron add, topics set, jobs list/show/
reschedule/cancel/retry/delete, dlq list, cron show/pause) through click's CliRunner on the
real Redis: whatever the arguments, a command succeeds (exit 0), or prints exactly one error
line and exits 2 (1 only for a lookup's "no such ..." answer), never a traceback; and a
refused command writes nothing (the namespace's keyspace is unchanged).

Budget: 80 examples per command group in CI (derandomized, about 20 s in all: each
invocation connects anew); HYPOTHESIS_PROFILE=long: 800 each.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import redis as sync_redis
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler.cli.main import cli
from tests.hypothesis_profiles import budget

FUZZ = settings(
    max_examples=budget(80),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
NOT_FOUND = re.compile(
    r"Error: (no |unknown )", re.I
)  # the runtime answers (exit 1) a lookup may give
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
# Argument text as a shell could pass it: anything but NUL (argv cannot hold one), lone
# surrogates included (undecodable bytes of argv arrive as \udc80..\udcff).
ARG = st.text(st.characters(exclude_characters="\x00"), max_size=30) | st.sampled_from(
    [
        "",
        " ",
        "t",
        "-",
        "--",
        "-1",
        "0",
        "1e400",
        "nan",
        "\udcff",
        "x" * 300,
        "2026-13-01T00:00",
        "90s",
        "{}",
        "null",
        "[1,",
        "9999999999999999999999d",
    ]
)


def mostly(
    valid: st.SearchStrategy[Any], bad: st.SearchStrategy[Any] = ARG
) -> st.SearchStrategy[Any]:
    return st.integers(0, 3).flatmap(lambda n: valid if n else bad)


def keyspace(redis_url: str, namespace: str) -> dict[bytes, bytes | None]:
    client = sync_redis.Redis.from_url(redis_url)
    try:
        keys = sorted(client.scan_iter(match="{" + namespace + "}:*", count=1000))
        return {k: client.dump(k) for k in keys}  # type: ignore[misc]
    finally:
        client.close()


def run(
    redis_url: str,
    database_url: str,
    namespace: str,
    args: list[str],
    record: Callable[[str], None] = event,
) -> None:
    """Invoke `horae ARGS` and check the outcome (see the module docstring)."""
    before = keyspace(redis_url, namespace)
    result = CliRunner().invoke(
        cli,
        ["--redis-url", redis_url, "--database-url", database_url, "--namespace", namespace, *args],
        prog_name="horae",
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        repr(result.exception),
    )
    errors = [line for line in result.stderr.splitlines() if not LOG_LINE.match(line)]
    assert "Traceback" not in result.output, (args, result.output)
    if result.exit_code == 0:
        record("ok")
        return
    record(f"exit {result.exit_code}")
    assert len(errors) == 1 and errors[0].startswith("Error: "), (args, result.exit_code, errors)
    assert result.exit_code == 2 or NOT_FOUND.match(errors[0]), (args, errors)
    assert keyspace(redis_url, namespace) == before, (args, errors)


def in_loop_free_thread() -> None:
    """The CLI runs asyncio.run: no event loop may be running in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise AssertionError("a CLI fuzz test runs inside an event loop")


@FUZZ
@given(
    name=mostly(st.sampled_from(["nightly", "c1"])),
    expr=mostly(st.sampled_from(["*/5 * * * *", "0 3 * * *", "30 30 3 * * *", "@daily"])),
    topic=mostly(st.sampled_from(["t", "reports"])),
    tz=mostly(st.sampled_from(["UTC", "Europe/Berlin"])),
    payload=mostly(st.sampled_from(['{"a": 1}', "null", "[]"])),
    misfire=st.none() | mostly(st.sampled_from(["coalesce", "skip", "all"])),
)
def test_cron_add(
    redis_url: str,
    database_url: str,
    namespace: str,
    name: str,
    expr: str,
    topic: str,
    tz: str,
    payload: str,
    misfire: str | None,
) -> None:
    in_loop_free_thread()
    args = ["cron", "add", name, expr, "--topic", topic, "--tz", tz, "--payload", payload]
    run(
        redis_url,
        database_url,
        namespace,
        args + (["--misfire", misfire] if misfire is not None else []),
    )


TOPIC_OPTIONS = st.lists(
    st.sampled_from(
        [
            ("--policy", mostly(st.sampled_from(["standard", "singleton", "short"]))),
            ("--concurrency", mostly(st.integers(-5, 100).map(str))),
            (
                "--rate-limit",
                mostly(st.sampled_from(["50/1s", "1/1d", "10/500ms", "0/1s", "5/0s", "5", "/1s"])),
            ),
            ("--timeout", mostly(st.sampled_from(["2m", "1ms", "30d", "31d", "0s", "-1s"]))),
            (
                "--priority-default",
                mostly(st.sampled_from(["low", "high", "1000", "1001", "-1000", "x"])),
            ),
            ("--warning-size", mostly(st.integers(-1, 10**7).map(str))),
            ("--dead-letter", mostly(st.sampled_from(["dead", "t"]))),
            ("--retry-attempts", mostly(st.integers(-1, 25).map(str))),
            ("--retry-backoff", mostly(st.sampled_from(["fixed", "exponential"]))),
            ("--retry-delay", mostly(st.sampled_from(["30s", "1s", "999ms", "2h"]))),
            ("--retry-max-delay", mostly(st.sampled_from(["1h", "1d", "2d", "500ms"]))),
            ("--retry-jitter", mostly(st.sampled_from(["none", "full", "equal"]))),
            (
                "--unset",
                mostly(st.sampled_from(["timeout", "rate_limit", "concurrency", "dead_letter"])),
            ),
        ]
    ),
    max_size=5,
).flatmap(lambda opts: st.tuples(*(st.tuples(st.just(o), v) for o, v in opts)))


@FUZZ
@given(name=mostly(st.sampled_from(["t", "orders"])), options=TOPIC_OPTIONS)
def test_topics_set(
    redis_url: str,
    database_url: str,
    namespace: str,
    name: str,
    options: tuple[tuple[str, str], ...],
) -> None:
    in_loop_free_thread()
    run(
        redis_url,
        database_url,
        namespace,
        ["topics", "set", name, *(x for pair in options for x in pair)],
    )


JOB_COMMANDS = st.one_of(
    st.tuples(
        st.just("jobs"),
        st.just("list"),
        st.sampled_from(["--topic", "--state", "--limit", "--cursor"]),
        mostly(st.sampled_from(["t", "running", "10", "0", "1001", "abc", "d:0:x"])),
    ),
    st.tuples(
        st.just("jobs"),
        st.sampled_from(["show", "cancel", "retry", "delete"]),
        mostly(st.just("j1")),
    ),
    st.tuples(
        st.just("jobs"),
        st.just("reschedule"),
        mostly(st.just("j1")),
        mostly(
            st.sampled_from(["90s", "2h", "1d", "2030-01-01T00:00", "2026-03-29T02:30", "1e20d"])
        ),
    ),
    st.tuples(
        st.just("dlq"),
        st.just("list"),
        mostly(st.just("dead")),
        st.sampled_from(["--limit", "--cursor"]),
        mostly(st.sampled_from(["10", "0", "x", "1:2"])),
    ),
    st.tuples(
        st.just("cron"),
        st.sampled_from(["show", "pause", "resume", "delete"]),
        mostly(st.just("c1")),
    ),
)


@FUZZ
@given(command=JOB_COMMANDS)
def test_job_commands(
    redis_url: str, database_url: str, namespace: str, command: tuple[str, ...]
) -> None:
    in_loop_free_thread()
    run(redis_url, database_url, namespace, list(command))


def test_a_name_utf8_cannot_encode_is_refused_or_not_found(
    redis_url: str, database_url: str, namespace: str
) -> None:
    """Found by the fuzz: a lone surrogate in a looked-up name (argv's undecodable bytes) failed
    in the Redis wire as UnicodeEncodeError (exit 1); now a lookup finds nothing and a write is
    refused by name."""
    for args in (
        ["topics", "set", "\ud800"],
        ["topics", "show", "\udcff"],
        ["jobs", "show", "\udcff"],
        ["cron", "show", "\ud800"],
        ["jobs", "cancel", "\udcff"],
        ["dlq", "list", "\ud800"],
    ):
        run(redis_url, database_url, namespace, args, record=lambda what: None)
