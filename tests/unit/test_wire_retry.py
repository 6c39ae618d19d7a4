"""A read on a connection that broke (a Redis restart) is sent again once on a new one;
a script or a write is not (its outcome is unknown): issue 16."""

from __future__ import annotations

from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from scheduler.store.pipe import Endpoint
from scheduler.store.wire import WireConnection


class Broken(WireConnection):
    """The first `failures` sends fail as a dropped connection does."""

    def __init__(self, failures: int) -> None:
        super().__init__(Endpoint(port=1), decode=True)
        self.failures, self.sent = failures, 0

    async def _call(self, *args: Any, raw: bool = False) -> Any:
        return (await self._call_many([args]))[0]

    async def _call_many(
        self, commands: Any, raw: Any = (), return_exceptions: bool = False
    ) -> list[Any]:
        self.sent += 1
        if self.sent <= self.failures:
            raise RedisConnectionError("Connection closed by server")
        return ["ok"] * len(commands)


async def test_a_read_is_sent_again_once() -> None:
    wire = Broken(failures=1)
    assert await wire.call("HGETALL", "k") == "ok" and wire.sent == 2
    wire = Broken(failures=1)
    assert await wire.call_many([("ZRANGE", "z", 0, 0), ("SMEMBERS", "s")]) == ["ok", "ok"]


async def test_a_read_is_not_retried_twice_and_a_write_not_at_all() -> None:
    with pytest.raises(RedisConnectionError):
        await Broken(failures=2).call("GET", "k")
    for command in (("EVALSHA", "sha", 0), ("HSET", "k", "f", "v")):
        wire = Broken(failures=1)
        with pytest.raises(RedisConnectionError):
            await wire.call(*command)
        assert wire.sent == 1
    wire = Broken(failures=1)
    with pytest.raises(RedisConnectionError):
        await wire.call_many([("GET", "k"), ("DEL", "k")])
