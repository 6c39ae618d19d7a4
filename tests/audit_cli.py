"""`horae audit ...` without the whole CLI: its commands under a bare group whose context
object the test gives (settings, or what the commands read from them)."""

from __future__ import annotations

import click

from audit.cli import register


def host(obj: object) -> click.Group:
    """A click group with the audit commands, `obj` as their context object."""

    @click.group()
    @click.pass_context
    def cli(ctx: click.Context) -> None:
        ctx.obj = obj

    register(cli)
    return cli
