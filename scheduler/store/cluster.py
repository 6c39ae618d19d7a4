"""The fast path on a Redis Cluster: `ClusterWire` speaks like a `WireConnection` (call,
call_many, evalsha) but sends each command to the node owning the slot of its first key.

Why our own routing and not redis-py's cluster client: the engine's calls go over
scheduler/store/wire.py's pipelined connections (bench/README.md: redis-py's per-call CPU was
most of a job's cost); this keeps them, one per node. The slot map comes from CLUSTER
SLOTS; a MOVED reply updates the slot and the command is sent again to its new owner (it
did not run), an ASK reply sends it once to the named node after ASKING, TRYAGAIN and
CLUSTERDOWN are retried after a pause. A broken connection (a node died) marks the map
stale: the next call reads it again, so after a failover the promoted replica is found.
Keyless commands go to one master; SCRIPT LOAD to every master.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import ssl
from collections.abc import Sequence
from typing import Any

from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from scheduler.store.pipe import Endpoint
from scheduler.store.wire import WireConnection

log = logging.getLogger("horae.cluster")

SLOTS = 16384
MAX_REDIRECTS = 16
BUSY_PAUSE_S = 0.05  # TRYAGAIN / CLUSTERDOWN: the cluster is moving a slot or electing a master
_KEYLESS = frozenset({"TIME", "PING", "INFO", "SCRIPT", "WAIT", "DBSIZE", "CLUSTER", "ASKING"})
Addr = tuple[str, int]


def first_key(args: Sequence[Any]) -> Any | None:
    """The key a command is routed by (None: a keyless command)."""
    name = str(args[0]).upper()
    if name in ("EVALSHA", "EVAL"):
        return args[3] if int(args[2]) > 0 else None
    if name == "XREADGROUP":
        return args[[str(a).upper() for a in args].index("STREAMS") + 1]
    if name in ("XGROUP", "XINFO"):
        return args[2]
    if name in _KEYLESS or len(args) < 2:
        return None
    return args[1]


class _Slots:
    """Slot -> node address, with a cache of hash tag -> slot (tags are few: {ns}, {ns|p})."""

    def __init__(self) -> None:
        self.owner: list[Addr | None] = [None] * SLOTS
        self.masters: list[Addr] = []
        self.nodes: list[Addr] = []  # masters and replicas
        self._tag_slots: dict[str, int] = {}

    def slot(self, key: Any) -> int:
        text = key.decode() if isinstance(key, bytes) else str(key)
        start = text.find("{")
        if start >= 0:
            end = text.find("}", start + 1)
            if end > start + 1:
                tag = text[start + 1 : end]
                cached = self._tag_slots.get(tag)
                if cached is None:
                    cached = self._tag_slots[tag] = key_slot(tag.encode())
                return cached
        return key_slot(text.encode())

    def load(self, reply: Sequence[Any], seed_host: str) -> None:
        owner: list[Addr | None] = [None] * SLOTS
        masters: list[Addr] = []
        nodes: list[Addr] = []
        for row in reply:
            start, end, master, *replicas = row
            addr = (str(master[0]) or seed_host, int(master[1]))
            owner[int(start) : int(end) + 1] = [addr] * (int(end) - int(start) + 1)
            if addr not in masters:
                masters.append(addr)
            for node in (master, *replicas):
                a = (str(node[0]) or seed_host, int(node[1]))
                if a not in nodes:
                    nodes.append(a)
        self.owner, self.masters, self.nodes = owner, masters, nodes


class ClusterWire:
    """Pipelined connections to every master of a cluster, each command sent to its slot's owner."""

    def __init__(
        self,
        seeds: Sequence[Endpoint],
        decode: bool = False,
        replicas: int = 0,
        replica_timeout_ms: int = 1000,
    ) -> None:
        if not seeds:
            raise ValueError("a cluster needs at least one seed node")
        self.endpoint = seeds[0]  # credentials and TLS every node shares
        self.decode = decode
        self.replicas, self.replica_timeout_ms = replicas, replica_timeout_ms
        self._seeds = [(e.host, e.port) for e in seeds]
        self._slots = _Slots()
        self._stale = True
        self._refreshing: asyncio.Task[None] | None = None
        self._conns: dict[Addr, WireConnection] = {}
        self._rotation = itertools.count()

    def _endpoint(self, addr: Addr) -> Endpoint:
        return dataclasses.replace(self.endpoint, host=addr[0], port=addr[1], path=None, db=0)

    def _conn(self, addr: Addr) -> WireConnection:
        conn = self._conns.get(addr)
        if conn is None:
            conn = self._conns[addr] = WireConnection(
                self._endpoint(addr), self.decode, self.replicas, self.replica_timeout_ms
            )
        return conn

    def pubsub_endpoint(self) -> Endpoint:
        """A node to SUBSCRIBE on, the next one at each call: classic PUBLISH reaches every node of
        a cluster, so any will do, and a reconnecting subscription moves past a dead one."""
        nodes = self._slots.nodes or self._seeds
        return self._endpoint(nodes[next(self._rotation) % len(nodes)])

    async def refresh(self) -> None:
        """Read the slot map (CLUSTER SLOTS) from the first node that answers."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._refresh())
        await asyncio.shield(self._refreshing)

    async def _refresh(self) -> None:
        errors: list[str] = []
        candidates = list(dict.fromkeys([*self._slots.nodes, *self._seeds]))
        for addr in candidates:
            try:
                reply = await self._conn(addr).call("CLUSTER", "SLOTS")
            except (RedisConnectionError, ResponseError, OSError) as exc:
                errors.append(f"{addr[0]}:{addr[1]}: {exc}")
                continue
            if reply:
                self._slots.load(reply, addr[0])
                self._stale = False
                return
            errors.append(f"{addr[0]}:{addr[1]}: no slots assigned")
        raise RedisConnectionError("no Redis Cluster node gave a slot map: " + "; ".join(errors))

    def _addr_of(self, command: Sequence[Any]) -> Addr:
        key = first_key(command)
        if key is None:
            return self._slots.masters[0]
        addr = self._slots.owner[self._slots.slot(key)]
        if addr is None:
            raise ResponseError(
                f"CLUSTERDOWN hash slot {self._slots.slot(key)} is not served by any node"
            )
        return addr

    async def call(self, *args: Any, raw: bool = False) -> Any:
        """One command, routed by its first key (SCRIPT: sent to every master)."""
        if str(args[0]).upper() == "SCRIPT":
            return await self._broadcast(args)
        return (await self.call_many([args], [raw]))[0]

    async def _broadcast(self, args: tuple[Any, ...]) -> Any:
        if self._stale:
            await self.refresh()
        replies = await asyncio.gather(*(self._conn(a).call(*args) for a in self._slots.masters))
        return replies[0]

    async def call_many(
        self,
        commands: Sequence[tuple[Any, ...]],
        raw: Sequence[bool] = (),
        return_exceptions: bool = False,
    ) -> list[Any]:
        """Several commands, each to its slot's owner (one pipelined write per node), replies in
        order; redirections are followed command by command.

        Raises:
            redis.exceptions.ResponseError: the first error reply (unless return_exceptions).
            redis.exceptions.ConnectionError: a node could not be reached (the map is read again
                on the next call).
        """
        if not commands:
            return []
        flags = [*raw, *[False] * (len(commands) - len(raw))]
        results: list[Any] = [None] * len(commands)
        todo = list(range(len(commands)))
        asking: dict[int, Addr] = {}
        for _ in range(MAX_REDIRECTS):
            if self._stale:
                await self.refresh()
            groups: dict[Addr, list[int]] = {}
            for i in todo:
                groups.setdefault(asking.get(i) or self._addr_of(commands[i]), []).append(i)
            replies = await asyncio.gather(
                *(
                    self._send(
                        addr,
                        [commands[i] for i in idx],
                        [flags[i] for i in idx],
                        [i in asking for i in idx],
                    )
                    for addr, idx in groups.items()
                ),
                return_exceptions=True,
            )
            todo, asking, pause = [], {}, False
            for (addr, idx), group in zip(groups.items(), replies):
                if isinstance(group, BaseException):
                    if isinstance(group, (RedisConnectionError, OSError)):
                        self._stale = True
                    raise group
                broken = next(
                    (
                        r
                        for r in group
                        if isinstance(r, BaseException) and not isinstance(r, ResponseError)
                    ),
                    None,
                )
                if broken is not None:  # the node's connection broke: its replies are unknown
                    self._stale = True
                    raise broken
                for i, reply in zip(idx, group):
                    redirect = _redirect(reply)
                    if redirect is None:
                        results[i] = reply
                        continue
                    kind, slot, target = redirect
                    todo.append(i)
                    if kind == "MOVED":
                        self._slots.owner[slot] = target
                        self._stale = True  # the rest of the map has probably moved too
                    elif kind == "ASK":
                        asking[i] = target
                    else:
                        pause = True
            if not todo:
                break
            if pause:
                await asyncio.sleep(BUSY_PAUSE_S)
        else:
            raise ResponseError(
                f"CLUSTERDOWN still redirected after {MAX_REDIRECTS} tries: {results}"
            )
        if not return_exceptions:
            for reply in results:
                if isinstance(reply, ResponseError):
                    raise reply
        return results

    async def _send(
        self, addr: Addr, commands: list[tuple[Any, ...]], raw: list[bool], ask: list[bool]
    ) -> list[Any]:
        if not any(ask):
            return await self._conn(addr).call_many(commands, raw, return_exceptions=True)
        sent: list[tuple[Any, ...]] = []
        flags: list[bool] = []
        for command, r, a in zip(commands, raw, ask):
            if a:
                sent.append(("ASKING",))
                flags.append(False)
            sent.append(command)
            flags.append(r)
        replies = await self._conn(addr).call_many(sent, flags, return_exceptions=True)
        return [reply for command, reply in zip(sent, replies) if command != ("ASKING",)]

    async def evalsha(self, sha: str, source: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """EVALSHA on the slot owner of its first key, loading the script on NOSCRIPT (a new or
        promoted master: script caches are not replicated)."""
        command = ("EVALSHA", sha, len(keys), *keys, *args)
        try:
            return (await self.call_many([command]))[0]
        except ResponseError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        await self.call("SCRIPT", "LOAD", source)
        return (await self.call_many([command]))[0]

    async def aclose(self) -> None:
        if self._refreshing is not None and not self._refreshing.done():
            self._refreshing.cancel()
            await asyncio.gather(self._refreshing, return_exceptions=True)
        conns, self._conns = list(self._conns.values()), {}
        await asyncio.gather(*(c.aclose() for c in conns))


def _redirect(reply: Any) -> tuple[str, int, Addr] | None:
    """(MOVED|ASK, slot, node) of a redirection reply; (BUSY, 0, ("", 0)) for TRYAGAIN and
    CLUSTERDOWN (nothing ran: send again later); None for any other reply."""
    if not isinstance(reply, ResponseError):
        return None
    text = str(reply)
    if text.startswith(("MOVED ", "ASK ")):
        kind, slot, node = text.split()[:3]
        host, _, port = node.rpartition(":")
        return kind, int(slot), (host, int(port))
    if text.startswith(("TRYAGAIN", "CLUSTERDOWN")):
        return "BUSY", 0, ("", 0)
    return None


Wire = WireConnection | ClusterWire  # what make_wire returns: the one interface both offer


def make_wire(
    redis: Any, decode: bool = True, replicas: int = 0, replica_timeout_ms: int = 1000
) -> WireConnection | ClusterWire:
    """The fast-path connection to where a redis-py client connects: a ClusterWire for a
    RedisCluster client (its startup nodes as seeds, its TLS settings for every node), else
    one WireConnection."""
    from redis.asyncio.cluster import RedisCluster

    if isinstance(redis, RedisCluster):
        kwargs = redis.nodes_manager.connection_kwargs
        context = _tls_context(kwargs)
        seeds = [
            Endpoint(
                host=n.host,
                port=int(n.port),
                ssl=context,
                username=kwargs.get("username"),
                password=kwargs.get("password"),
            )
            for n in redis.nodes_manager.startup_nodes.values()
        ]
        return ClusterWire(seeds, decode, replicas, replica_timeout_ms)
    return WireConnection(
        Endpoint.of_pool(redis.connection_pool), decode, replicas, replica_timeout_ms
    )


def _tls_context(kwargs: dict[str, Any]) -> ssl.SSLContext | None:
    """The SSL context redis-py's cluster connections use (None: no TLS), built by redis-py
    from the same ssl_* arguments so both paths verify every node alike."""
    from redis.asyncio.connection import SSLConnection

    if kwargs.get("connection_class") is not SSLConnection:
        return None
    options = {k: v for k, v in kwargs.items() if k.startswith("ssl_")}
    return SSLConnection(**options).ssl_context.get()
