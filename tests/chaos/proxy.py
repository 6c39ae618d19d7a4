"""A fault-injecting TCP proxy for the chaos run: workers and the producer reach Redis
and PostgreSQL through it, and the fault plan cuts the path (every connection dropped,
new ones refused), delays it (each chunk delivered `delay_s` late, in order, without
slowing the stream down) or resets connections in the middle of a reply (half of a
reply forwarded, then RST: the client cannot know whether its command ran)."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)  # hashed by identity: the proxy keeps a set of open pairs
class _Pair:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self, rst: bool = False) -> None:
        for writer in (self.client, self.server):
            sock = writer.get_extra_info("socket")
            if rst and sock is not None:  # linger 0: close() sends RST, not FIN
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            writer.transport.abort()


class FaultProxy:
    """127.0.0.1:<port> forwarding to upstream; `counts` says what it did to connections."""

    def __init__(self, name: str, upstream_host: str, upstream_port: int) -> None:
        self.name, self.upstream = name, (upstream_host, upstream_port)
        self.port = 0
        self.refusing = False
        self.delay_s = 0.0
        self.reset_replies = False
        self.counts: Counter[str] = Counter()
        self._pairs: set[_Pair] = set()
        # Every task it started (both pumps of each pair and their delivering halves), so that
        # close() ends them all, also those of a pair a reset already dropped: a task left
        # pending when the loop closes is destroyed mid-`finally` (an unraisable error).
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def close(self) -> None:
        self.drop_all()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _start(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def drop_all(self, rst: bool = False) -> int:
        """Abort every open connection (both sides); returns how many."""
        pairs, self._pairs = list(self._pairs), set()
        for pair in pairs:
            pair.abort(rst)
            for task in pair.tasks:
                task.cancel()
        return len(pairs)

    def heal(self) -> None:
        """Back to a plain pipe: accept, no delay, no resets."""
        self.refusing, self.delay_s, self.reset_replies = False, 0.0, False

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            self.counts["refused"] += 1
            writer.transport.abort()
            return
        try:
            host, port = self.upstream
            if host.startswith(
                "/"
            ):  # a server on a unix socket (the embedded PostgreSQL's directory)
                up_reader, up_writer = await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
            else:
                up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            self.counts["upstream_down"] += 1
            writer.transport.abort()
            return
        pair = _Pair(writer, up_writer)
        self._pairs.add(pair)
        self.counts["connections"] += 1
        pair.tasks = [
            self._start(self._pump(reader, up_writer, pair, replies=False)),
            self._start(self._pump(up_reader, writer, pair, replies=True)),
        ]

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, pair: _Pair, replies: bool
    ) -> None:
        """Copy src to dst; with a delay, a second task writes each chunk when its time comes."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        writer_task = self._start(self._deliver(queue, dst, pair, replies))
        try:
            while data := await src.read(65536):
                queue.put_nowait((loop.time() + self.delay_s, data))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            queue.put_nowait((0.0, b""))
            await asyncio.gather(writer_task, return_exceptions=True)
            self._pairs.discard(pair)
            pair.abort()

    async def _deliver(
        self,
        queue: asyncio.Queue[tuple[float, bytes]],
        dst: asyncio.StreamWriter,
        pair: _Pair,
        replies: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            at, data = await queue.get()
            if not data:
                return
            if (wait := at - loop.time()) > 0:
                await asyncio.sleep(wait)
            if replies and self.reset_replies:
                dst.write(
                    data[: max(1, len(data) // 2)]
                )  # part of a reply, then the connection dies
                self.counts["reset_mid_reply"] += 1
                self._pairs.discard(pair)
                pair.abort(rst=True)
                return
            dst.write(data)
            try:
                await dst.drain()
            except OSError:
                return
