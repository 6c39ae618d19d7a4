"""Who a job operation records as its actor: the argument, else the innermost
acting_as() block of this scheduler (per task), else user@host."""

from __future__ import annotations

import asyncio
import getpass
import socket
from typing import Any, cast

import pytest

from scheduler.facade.operations import Host, JobOperations, default_actor


def ops() -> JobOperations:
    return JobOperations(cast(Host, object()))  # actor() touches no store


def test_argument_then_innermost_block_then_user_at_host() -> None:
    o = ops()
    assert o.actor() == default_actor() == f"{getpass.getuser()}@{socket.gethostname()}"
    with o.acting_as("alice"):
        assert o.actor() == "alice" and o.actor("bob") == "bob"
        with o.acting_as("carol"):
            assert o.actor() == "carol"
        assert o.actor() == "alice"
        assert ops().actor() == default_actor(), "another scheduler's block does not apply"
    assert o.actor(" ") == default_actor(), "a blank actor is none"


async def test_a_block_holds_for_its_own_task_only() -> None:
    o = ops()
    seen: list[str] = []

    async def other() -> None:
        seen.append(o.actor())

    task = asyncio.create_task(other())  # started outside the block: its own context
    with o.acting_as("alice"):
        await task
        await asyncio.create_task(other())  # started inside: copies the block
    assert seen == [default_actor(), "alice"]


def test_no_login_name_falls_back_to_the_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_user() -> Any:
        raise OSError("no login name")

    monkeypatch.setattr(getpass, "getuser", no_user)
    user, _, host = default_actor().partition("@")
    assert user.isdigit() and host == socket.gethostname()
