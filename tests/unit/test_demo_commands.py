"""The commands `horae demo` (`make demo`) suggests work when pasted (issue 19): they
name the demo's namespace, and the click group parses them to that namespace and to
commands that exist."""

from __future__ import annotations

import shlex

import click
import pytest

from scheduler.cli.demo import suggested_commands
from scheduler.cli.main import cli


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
