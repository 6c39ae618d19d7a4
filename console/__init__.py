"""horae's web console and HTTP API (`horae console`, docs/how-to/console.md).

A composition root above `scheduler` and `audit`, beside the CLI: `create_app()` is an
ASGI application that serves the pages and `/api/v1` from one Scheduler, and can be
mounted in a user's own ASGI application. Needs the `console` extra
(`pip install 'horae[console]'`); imported lazily so the `horae` command starts without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from console.app import create_app

        return create_app
    raise AttributeError(f"module 'console' has no attribute {name!r}")
