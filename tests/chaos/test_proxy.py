"""The chaos run's fault proxy ends every task it started when it closes, also those of a pair a
reset already dropped and a chunk still held back by a delay: a task left pending when the test's
loop closes is destroyed in the middle of its `finally`, and pytest reports that as an
unraisable error (the 60-second chaos run failed on it now and then)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.chaos.proxy import FaultProxy


@pytest.fixture
async def echo() -> AsyncIterator[int]:
    """An upstream that sends back what it gets."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield int(server.sockets[0].getsockname()[1])
    server.close()
    await server.wait_closed()


def _proxy_tasks() -> list[asyncio.Task[object]]:
    return [
        t
        for t in asyncio.all_tasks()
        if getattr(t.get_coro(), "__qualname__", "").startswith("FaultProxy.")
    ]


async def test_close_ends_a_delayed_chunk_s_tasks(echo: int) -> None:
    proxy = FaultProxy("test", "127.0.0.1", echo)
    port = await proxy.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"ping")
    assert await reader.read(4) == b"ping"  # (the pair is up)
    proxy.delay_s = 30.0
    writer.write(b"held back")
    await asyncio.sleep(0.1)  # its chunk now waits in the proxy
    await proxy.close()
    assert _proxy_tasks() == []
    writer.close()


async def test_close_ends_the_tasks_of_a_pair_a_reset_dropped(echo: int) -> None:
    proxy = FaultProxy("test", "127.0.0.1", echo)
    port = await proxy.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    proxy.reset_replies = True
    writer.write(b"a reply cut in half")
    await reader.read(100)  # half of it, then the reset
    await proxy.close()
    assert _proxy_tasks() == []
    assert proxy.counts["reset_mid_reply"] == 1
    writer.close()
