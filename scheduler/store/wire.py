"""The one way the engine and the audit relay talk to Redis: pipelined connections
for every command of the store (script calls and reads) and of the outbox stream,
and the wake-up subscription.

Why not redis-py here: its per-call client CPU (pool checkout, per-call timeout,
Python encoder, stream reader) was most of a job's cost in a worker (numbers:
bench/README.md). Here a command is packed by hiredis (in C) and written at once,
without waiting for earlier replies; replies are parsed by hiredis and handed to
the waiting callers in order, so a call costs little more than a future. Writes
are not held back to batch a loop turn's commands: Redis answers a client's
pipelined commands together, so a scheduling call written with a worker's claim
and settlement would wait for all three. redis-py only resolves the URL (address,
TLS, credentials, database: `Endpoint.of_pool`), so both agree on the server.

A connection either decodes replies (bulk strings come back as str, UTF-8 with
invalid bytes replaced) or not; a call may ask for bytes on a decoding connection
(`raw=True`: a value whose parts must be joined before decoding).

Only non-blocking commands may share a WireConnection: a blocking one holds up
every caller behind it. A connection that breaks fails the calls in flight with
redis.exceptions.ConnectionError (their outcome is unknown) and the next call
reconnects. Only read-only commands (READ_ONLY) are sent again, once, on a new
connection when the old one broke (a Redis restart, a dropped socket): scripts and
writes are not all idempotent, so their callers decide.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from scheduler.store.pipe import Endpoint, Pipe, close_pipe, open_pipe

log = logging.getLogger("horae.wire")

# Commands that only read: safe to send again when a connection broke before the reply.
READ_ONLY = frozenset(
    {
        "GET",
        "MGET",
        "EXISTS",
        "HGET",
        "HMGET",
        "HGETALL",
        "HLEN",
        "ZRANGE",
        "ZRANGEBYSCORE",
        "ZREVRANGE",
        "ZSCORE",
        "ZCOUNT",
        "ZCARD",
        "ZRANK",
        "LRANGE",
        "SMEMBERS",
        "SISMEMBER",
        "SCARD",
        "XRANGE",
        "XREVRANGE",
        "XLEN",
        "XINFO",
        "XPENDING",
        "INFO",
        "PING",
        "TIME",
        "TTL",
        "PTTL",
        "TYPE",
        "DBSIZE",
    }
)


class NotReplicated(ResponseError):
    """durability="replicated": fewer replicas than asked acknowledged a write in time."""


def _redirected(reply: Any) -> bool:
    """A Redis Cluster reply saying the command did not run here (MOVED, ASK, TRYAGAIN,
    CLUSTERDOWN)."""
    return isinstance(reply, ResponseError) and str(reply).startswith(
        ("MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN")
    )


def _read_only(commands: Sequence[Sequence[Any]]) -> bool:
    return all(str(c[0]).upper() in READ_ONLY for c in commands)


class WireConnection:
    """One pipelined connection, opened on first use and again after a break.

    `decode`: bulk replies come back as str (UTF-8, invalid bytes replaced), not bytes.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        decode: bool = False,
        replicas: int = 0,
        replica_timeout_ms: int = 1000,
    ) -> None:
        self.endpoint = endpoint
        self.decode = decode
        # durability="replicated": every script call is followed, on this connection, by
        # WAIT <replicas> <timeout>; fewer acknowledgements fail the call (NotReplicated).
        self.replicas, self.replica_timeout_ms = replicas, replica_timeout_ms
        self._pipe: Pipe | None = None
        self._opening: asyncio.Task[Pipe] | None = None

    def pubsub_endpoint(self) -> Endpoint:
        """Where a subscription connects (the cluster wire rotates through its nodes)."""
        return self.endpoint

    async def call(self, *args: Any, raw: bool = False) -> Any:
        """Send one command and return its reply (see _call); a read-only one is sent
        again once on a new connection when the connection broke."""
        try:
            return await self._call(*args, raw=raw)
        except RedisConnectionError:
            if not _read_only([args]):
                raise
            return await self._call(*args, raw=raw)

    async def _call(self, *args: Any, raw: bool = False) -> Any:
        """Send one command and return its reply (str or bytes, int, list, None).

        Args:
            args: the command and its arguments.
            raw: bulk strings as bytes even on a decoding connection.

        Raises:
            redis.exceptions.ResponseError: Redis answered with an error.
            redis.exceptions.ConnectionError: no connection, or it broke before the reply.
        """
        pipe = self._pipe
        if pipe is None or pipe.transport is None or pipe.transport.is_closing():
            pipe = await self._connect()
        return await pipe.request(args, raw)

    async def call_many(
        self,
        commands: Sequence[tuple[Any, ...]],
        raw: Sequence[bool] = (),
        return_exceptions: bool = False,
    ) -> list[Any]:
        """Several commands in one write (see _call_many); all read-only ones are sent
        again once on a new connection when the connection broke. `return_exceptions`:
        an error reply is returned in its place instead of raised (the cluster wire
        re-routes MOVED/ASK replies one by one)."""
        try:
            return await self._call_many(commands, raw, return_exceptions)
        except RedisConnectionError:
            if not _read_only(commands):
                raise
            return await self._call_many(commands, raw, return_exceptions)

    async def _call_many(
        self,
        commands: Sequence[tuple[Any, ...]],
        raw: Sequence[bool] = (),
        return_exceptions: bool = False,
    ) -> list[Any]:
        """Send several commands in one write and return their replies, in order.

        Args:
            commands: each a command and its arguments.
            raw: per command, bulk strings as bytes (missing entries: False).

        Raises:
            redis.exceptions.ResponseError: the first error reply (every reply was read).
            redis.exceptions.ConnectionError: no connection, or it broke before the replies.
        """
        if not commands:
            return []
        pipe = self._pipe
        if pipe is None or pipe.transport is None or pipe.transport.is_closing():
            pipe = await self._connect()
        flags = [*raw, *[False] * (len(commands) - len(raw))]
        wait = self.replicas > 0 and any(str(c[0]).upper() == "EVALSHA" for c in commands)
        if wait:
            commands, flags = (
                [*commands, ("WAIT", self.replicas, self.replica_timeout_ms)],
                [*flags, False],
            )
        replies = list(
            await asyncio.gather(
                *pipe.request_many(commands, flags), return_exceptions=return_exceptions
            )
        )
        if wait:
            acked = replies.pop()
            # A node that redirected every script (now a replica) ran nothing: its WAIT error must
            # not hide the MOVED.
            if not all(
                _redirected(r) for c, r in zip(commands, replies) if str(c[0]).upper() == "EVALSHA"
            ):
                self._check_replicated(acked)
        return replies

    def _check_replicated(self, acked: Any) -> None:
        if isinstance(acked, BaseException):
            raise acked
        if int(acked) < self.replicas:
            raise NotReplicated(
                f"NOTREPLICATED the write reached the master but only {acked} of "
                f"{self.replicas} replica(s) acknowledged it within "
                f"{self.replica_timeout_ms} ms (durability=replicated): a failover now "
                "could lose it"
            )

    async def _connect(self) -> Pipe:
        # Callers that find no connection share one attempt (no stampede of sockets).
        if self._opening is None or self._opening.done():
            self._opening = asyncio.ensure_future(open_pipe(self.endpoint, decode=self.decode))
        self._pipe = await asyncio.shield(self._opening)
        return self._pipe

    async def evalsha(self, sha: str, source: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """EVALSHA, loading the script first when Redis does not have it (NOSCRIPT: it did not
        run)."""
        try:
            if self.replicas:
                return (await self.call_many([("EVALSHA", sha, len(keys), *keys, *args)]))[0]
            return await self.call("EVALSHA", sha, len(keys), *keys, *args)
        except ResponseError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        await self.call("SCRIPT", "LOAD", source)
        if self.replicas:
            return (await self.call_many([("EVALSHA", sha, len(keys), *keys, *args)]))[0]
        return await self.call("EVALSHA", sha, len(keys), *keys, *args)

    async def aclose(self) -> None:
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
            await asyncio.gather(self._opening, return_exceptions=True)
        await close_pipe(self._pipe)
        self._pipe = None


class Subscription:
    """SUBSCRIBE to channels and call `on_message(channel, data)` per message; a broken
    connection is reopened (with backoff) and reported as `on_message(None, None)`,
    because messages sent meanwhile are lost (pub/sub is at most once)."""

    def __init__(
        self,
        endpoint: Endpoint | Callable[[], Endpoint],
        channels: Sequence[str],
        on_message: Callable[[bytes | None, bytes | None], None],
    ) -> None:
        # A callable is asked again on every (re)connection: on a cluster, any node will do
        # (classic PUBLISH reaches every node), and a dead one is left for the next.
        self.endpoint, self.channels, self.on_message = endpoint, list(channels), on_message
        self._task: asyncio.Task[None] | None = None
        self._pipe: Pipe | None = None

    def _push(self, reply: list[Any]) -> None:
        self.on_message(reply[1], reply[2])

    async def start(self) -> None:
        """Subscribe; returns once the first subscription is confirmed."""
        await self._subscribe()
        self._task = asyncio.create_task(self._keep(), name="horae-wake-subscription")

    async def _subscribe(self) -> None:
        pipe = await open_pipe(
            self.endpoint() if callable(self.endpoint) else self.endpoint, self._push
        )
        for channel in self.channels:  # each SUBSCRIBE is answered by one confirmation
            await pipe.request(("SUBSCRIBE", channel))
        self._pipe = pipe

    async def _keep(self) -> None:
        delay = 0.05
        while True:
            if self._pipe is not None:
                await asyncio.shield(self._pipe.closed)  # (cancelling us must not cancel it)
                self._pipe = None
                log.warning(
                    "wake-up subscription lost; reconnecting", extra={"event": "wake_error"}
                )
                self.on_message(None, None)
            try:
                await self._subscribe()
                delay = 0.05
                self.on_message(None, None)  # anything published while we were away
            except (RedisConnectionError, ResponseError) as exc:
                log.warning("wake-up subscription failed: %s", exc, extra={"event": "wake_error"})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await close_pipe(self._pipe)
        self._pipe = None
