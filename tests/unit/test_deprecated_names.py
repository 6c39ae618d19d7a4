"""The names replaced in this release (kept one release, warning) appear nowhere in the README or
the documentation, but for the upgrading guide's table of them: they show only the new ones. The
aliases are found, not listed: a Scheduler method whose docstring starts with "Deprecated", a
hidden `horae` command, and the bare `horae workers`."""

from __future__ import annotations

import re
from pathlib import Path

import click

from scheduler.api import Scheduler
from scheduler.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
# The upgrading guide lists the old names on purpose; the CLI reference shows the `workers` group.
SHOWN = [ROOT / "README.md"] + [
    p for p in sorted((ROOT / "docs").rglob("*.md")) if p.name not in ("upgrading.md", "cli.md")
]
README = "\n".join(p.read_text(encoding="utf-8") for p in SHOWN)


def _hidden(group: click.Group, prefix: str = "") -> list[str]:
    out = []
    for name, command in group.commands.items():
        if command.hidden:
            out.append(f"{prefix}{name}")
        if isinstance(command, click.Group):
            out += _hidden(command, f"{prefix}{name} ")
    return out


def test_the_readme_shows_no_deprecated_scheduler_name() -> None:
    aliases = [
        name
        for name, value in vars(Scheduler).items()
        if (getattr(value, "__doc__", None) or "").startswith("Deprecated")
    ]
    assert aliases == ["unschedule"]
    assert [a for a in aliases if re.search(rf"\b{a}\(", README)] == []


def test_the_readme_shows_no_deprecated_command() -> None:
    hidden = _hidden(cli)
    assert hidden == ["cron remove"]
    assert [c for c in hidden if re.search(rf"horae {c}\b", README)] == []
    assert re.findall(r"horae workers(?! (?:list|drain)\b)", README) == []
