"""Request dependencies shared by the pages and the API: the console and the caller."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from fastapi import Request

from console.auth import Principal

if TYPE_CHECKING:
    from console.app import Console


def console_of(request: Request) -> Console:
    return cast("Console", request.app.state.console)


def caller(request: Request) -> Principal:
    """The authenticated caller (kept on request.state for the templates)."""
    who = console_of(request).auth.principal(request)
    request.state.who = who
    return who
