"""The commands `horae demo` (`make demo`) suggests work when pasted (issue 19): they
name the demo's namespace, and the click group parses them to that namespace and to
commands that exist."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime

import click
import pytest
from rich.console import Console

from scheduler.cli.demo import _table, suggested_commands
from scheduler.cli.main import cli
from scheduler.core.job import JobInfo, JobState


def parse(command: str) -> tuple[str | None, list[str]]:
    """(the --namespace the group would get, the subcommand path) of a printed command."""
    args = shlex.split(command)
    assert args[0] == "horae"
    ctx = cli.make_context("horae", args[1:], resilient_parsing=True)
    path, group, rest = [], cli, list(ctx.protected_args) + list(ctx.args)
    while isinstance(group, click.Group) and rest:
        sub = group.get_command(ctx, rest[0])
        assert sub is not None, f"{command}: no command {rest[0]!r}"
        path.append(rest.pop(0))
        group = sub
    return ctx.params["namespace"], path


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # ctx.protected_args on click >= 8.2
@pytest.mark.parametrize("namespace", ["horae-demo", "team a-demo"])
def test_every_suggestion_names_the_demo_namespace(namespace: str) -> None:
    commands = suggested_commands(namespace, "job-42", audit=True)

    assert commands[0] == f"horae --namespace {shlex.quote(namespace)} audit show job-42"
    assert [parse(c) for c in commands] == [
        (namespace, ["audit", "show"]),
        (namespace, ["jobs", "show"]),
        (namespace, ["jobs", "stats"]),
    ]


def test_the_default_namespace_needs_no_flag_and_no_audit_no_audit_command() -> None:
    assert suggested_commands("horae", "j1", audit=False) == [
        "horae jobs show j1",
        "horae jobs stats",
    ]


@pytest.mark.parametrize(
    ("rows", "text"), [(1, "completed, 1 attempt row"), (3, "failed, 3 attempt rows")]
)
def test_the_demo_table_counts_attempt_rows_in_words(rows: int, text: str) -> None:
    """`horae demo`'s table says "1 attempt row", not "1 attempt rows" (issue 30)."""
    info = JobInfo(
        "j1", "t", JobState.COMPLETED, 1, 5, datetime(2026, 11, 27, tzinfo=UTC), None, None, None
    )
    console = Console(width=200, record=True)
    console.print(_table([info], {"j1": (text.split(",")[0], rows)}))
    out = console.export_text()
    assert text in out and f"{text}s" not in out
