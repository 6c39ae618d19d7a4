"""One pipelined connection to Redis, the layer under WireConnection (wire.py): commands
packed by hiredis and written at once, replies parsed by hiredis and handed to their waiters
in order; opened with the endpoint's handshake (AUTH, SELECT), and closed, or discarded when
it never served, without leaving its socket to the garbage collector."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

CONNECT_TIMEOUT_S = 10.0
DISCARD_TIMEOUT_S = 1.0  # how long a refused connection's socket may take to close


@dataclass(frozen=True)
class Endpoint:
    """Where and as whom to connect, read off a redis-py pool (so both clients agree)."""

    host: str = "127.0.0.1"
    port: int = 6379
    path: str | None = None  # a unix socket instead of host:port
    ssl: ssl.SSLContext | None = None
    username: str | None = None
    password: str | None = field(
        default=None, repr=False
    )  # never in a repr, a log line or an error
    db: int = 0

    @classmethod
    def of_pool(cls, pool: aioredis.ConnectionPool) -> Endpoint:
        conn = pool.make_connection()  # type: ignore[no-untyped-call]  # never connected: settings only
        common = {"username": conn.username, "password": conn.password, "db": int(conn.db or 0)}
        if isinstance(conn, UnixDomainSocketConnection):
            return cls(path=conn.path, **common)
        context = conn.ssl_context.get() if isinstance(conn, SSLConnection) else None
        return cls(host=conn.host, port=int(conn.port), ssl=context, **common)

    def handshake(self) -> list[tuple[Any, ...]]:
        """The commands that make a fresh connection this endpoint's (AUTH, SELECT)."""
        out: list[tuple[Any, ...]] = []
        if self.password is not None:
            out.append(
                ("AUTH", self.username, self.password) if self.username else ("AUTH", self.password)
            )
        if self.db:
            out.append(("SELECT", self.db))
        return out


def as_map(flat: Sequence[Any] | None) -> dict[Any, Any]:
    """A RESP2 map reply (HGETALL, XINFO, stream entry fields: [k1, v1, k2, v2, ...]) as a dict."""
    return dict(zip(flat[::2], flat[1::2])) if flat else {}


class Pipe(asyncio.Protocol):
    """Requests written as they come, replies matched to waiters in order."""

    def __init__(self, on_push: Callable[[Any], None] | None = None, decode: bool = False) -> None:
        self.transport: asyncio.Transport | None = None
        self._decode = decode
        self._reader = (
            hiredis.Reader(replyError=ResponseError, encoding="utf-8", errors="replace")
            if decode
            else hiredis.Reader(replyError=ResponseError)
        )
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._raw: set[asyncio.Future[Any]] = (
            set()
        )  # waiters that want bytes from a decoding reader
        self._reading_bytes = False  # the reader's mode: switched only between replies
        self._on_push = on_push  # subscription mode: every reply goes here, none is awaited
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def _parse_next_as_bytes(self, as_bytes: bool) -> None:
        if as_bytes != self._reading_bytes:
            self._reader.set_encoding(
                None if as_bytes else "utf-8", None if as_bytes else "replace"
            )
            self._reading_bytes = as_bytes

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while True:
            if self._raw or self._reading_bytes:  # (the common case skips this)
                self._parse_next_as_bytes(bool(self._waiting) and self._waiting[0] in self._raw)
            reply = self._reader.gets()
            if reply is False:
                return
            if (
                self._on_push is not None
                and type(reply) is list
                and reply
                and reply[0] == b"message"
            ):
                self._on_push(reply)  # a published message: nobody awaits it
                continue
            waiter = self._waiting.popleft()
            self._raw.discard(waiter)
            if waiter.done():  # its caller was cancelled; the reply is dropped
                continue
            if isinstance(reply, ResponseError):
                waiter.set_exception(reply)
            else:
                waiter.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        error = RedisConnectionError(f"connection to Redis lost: {exc or 'closed'}")
        self._raw.clear()
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_exception(error)
        if not self.closed.done():
            self.closed.set_result(None)

    def request(self, args: tuple[Any, ...], raw: bool = False) -> asyncio.Future[Any]:
        """Send one command; its reply resolves the returned future (bytes when `raw`)."""
        if self.transport is None or self.transport.is_closing():
            raise RedisConnectionError("connection to Redis is closed")
        self.transport.write(pack(args))
        return self._waiter(raw)

    def request_many(
        self, commands: Sequence[tuple[Any, ...]], raw: Sequence[bool]
    ) -> list[asyncio.Future[Any]]:
        """Send several commands in one write; a future per reply, in order."""
        if self.transport is None or self.transport.is_closing():
            raise RedisConnectionError("connection to Redis is closed")
        self.transport.write(b"".join(map(pack, commands)))
        return [self._waiter(r) for r in raw]

    def _waiter(self, raw: bool) -> asyncio.Future[Any]:
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        if raw and self._decode:
            self._raw.add(waiter)
        return waiter


async def open_pipe(
    endpoint: Endpoint, on_push: Callable[[Any], None] | None = None, decode: bool = False
) -> Pipe:
    loop = asyncio.get_running_loop()
    made: list[Pipe] = []

    def factory() -> Pipe:
        made.append(Pipe(on_push, decode))
        return made[0]

    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            if endpoint.path is not None:
                _, pipe = await loop.create_unix_connection(factory, endpoint.path)
            else:
                _, pipe = await loop.create_connection(
                    factory, endpoint.host, endpoint.port, ssl=endpoint.ssl
                )
            for command in endpoint.handshake():
                await pipe.request(command)
    except BaseException as exc:
        # A connection made but refused (a wrong password), timed out or cancelled during
        # its handshake is closed here, not left to the garbage collector (over TLS, an
        # unawaited close can outlive the caller's event loop).
        if made:
            await discard(made[0])
        if isinstance(exc, ssl.SSLCertVerificationError):
            raise RedisConnectionError(
                f"cannot connect to Redis at {endpoint.host}:{endpoint.port}: "
                f"its TLS certificate was refused ({exc.verify_message}); give "
                f"the CA that signed it as ssl_ca_certs=PATH in the rediss:// "
                "(or rediss+cluster://) URL and connect by a name the certificate holds"
            ) from exc
        if isinstance(exc, (OSError, TimeoutError)):
            raise RedisConnectionError(f"cannot connect to Redis: {exc}") from exc
        raise
    return pipe


async def discard(pipe: Pipe) -> None:
    """Drop a connection that never served: abort it (no TLS goodbye to a server that
    refused us) and wait, briefly, until its socket is closed."""
    if pipe.transport is None:
        return
    pipe.transport.abort()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(pipe.closed), DISCARD_TIMEOUT_S)


async def close_pipe(pipe: Pipe | None) -> None:
    """Close a pipe's connection and wait until it is gone (its waiters failed)."""
    if pipe is not None and pipe.transport is not None:
        pipe.transport.close()
        await pipe.closed


def pack(args: tuple[Any, ...]) -> bytes:
    """A command in Redis' protocol. Text that UTF-8 cannot encode (a lone surrogate: a name
    read from argv or a file with undecodable bytes) goes as its surrogatepass bytes, so a
    lookup by such a name finds nothing instead of failing; scheduling refuses such names
    (validation.check_text), so none is ever stored."""
    try:
        packed: bytes = hiredis.pack_command(args)
    except UnicodeEncodeError:
        raw: tuple[Any, ...] = tuple(
            a.encode("utf-8", "surrogatepass") if isinstance(a, str) else a for a in args
        )
        packed = hiredis.pack_command(raw)
    return packed
