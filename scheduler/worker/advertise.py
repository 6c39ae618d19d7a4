"""The worker registry: which topics a worker claims, the entry it advertises with
each heartbeat (so workers see which topics a live worker serves) and WorkerInfo,
what `Scheduler.workers()` lists. Pure: the store reads and writes the entries."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib.metadata import PackageNotFoundError, version

from listeners.shown import shown
from scheduler.core.errors import ConfigError, ScheduleError
from scheduler.core.outbox import SCHEDULE_FAILED_TOPIC
from scheduler.core.timeutil import ms_to_utc


@dataclass(frozen=True)
class ClaimFilter:
    """What a worker passes to claim: its topics, and whether it also takes jobs of topics
    no live worker serves (no topics and not `unserved`: every topic, no filter), and the
    topics it has listeners for: only those have their dead letters run by it."""

    topics: tuple[str, ...]
    unserved: bool
    all_topics: bool
    listened: tuple[str, ...]

    @classmethod
    def of(
        cls, listened: Iterable[str], topics: Sequence[str] | None, all_topics: bool
    ) -> ClaimFilter:
        """The filter of a worker with listeners for `listened`.

        Args:
            listened: the topics its listener registry has listeners for.
            topics: explicit topics (exactly those; None: the ones it listens to, plus unserved
                ones).
            all_topics: claim every topic but the known ones it has no listeners for
                (topic_memory.py; jobs of a topic no worker served complete as no_listener).

        Raises:
            ConfigError: both `topics` and `all_topics`.
        """
        own = tuple(sorted(t for t in set(listened) if t != SCHEDULE_FAILED_TOPIC))
        if all_topics:
            if topics:
                raise ConfigError("a worker takes either explicit topics or all topics, not both")
            return cls((), False, True, own)
        if topics:
            explicit = tuple(dict.fromkeys(topics))
            return cls(explicit, False, False, tuple(t for t in own if t in explicit))
        return cls(own, True, False, own)

    def advertised(self, listened: Iterable[str]) -> tuple[str, ...]:
        """The topics the worker serves in the registry: the ones it claims, or, taking every
        topic, the ones it has listeners for."""
        if self.all_topics:
            return tuple(sorted(t for t in set(listened) if t != SCHEDULE_FAILED_TOPIC))
        return self.topics


RUNNING, DRAINING = "running", "draining"  # WorkerInfo.state


@dataclass(frozen=True)
class WorkerInfo:
    """One live worker as its last heartbeat advertised it. `state`: "running", or "draining" once
    an operator asked it to drain (`Scheduler.drain_worker`) or it is stopping (it claims no more
    and exits when its attempts finished or its grace ran out); `drain_requested_at`: when an
    operator asked (None: nobody did)."""

    id: str
    host: str
    pid: int
    topics: tuple[str, ...]
    concurrency: int
    running: int
    last_heartbeat: datetime
    all_topics: bool
    state: str = "running"
    drain_requested_at: datetime | None = None
    version: str = ""  # horae's version in that worker ("": a worker from before it was advertised)

    @property
    def draining(self) -> bool:
        return self.state == DRAINING


@cache
def horae_version() -> str:
    """The installed horae's version, advertised so operators see which release each worker runs
    (a rolling upgrade shows both); "0+unknown" from a source tree never installed."""
    try:
        return version("horae")
    except PackageNotFoundError:
        return "0+unknown"


def entry_json(
    topics: Sequence[str],
    concurrency: int,
    running: int,
    all_topics: bool,
    pid: int,
    now_ms: int,
    ttl_ms: int,
    host: str | None = None,
    stopping: bool = False,
) -> str:
    """The registry entry of a worker (compact JSON ending in `}`: the scripts append a drain
    request to it; layout in lua/advertise_worker.lua). `stopping`: it drains (claims no more)."""
    entry: dict[str, object] = {
        "host": host if host is not None else socket.gethostname(),
        "pid": pid,
        "topics": list(topics),
        "concurrency": concurrency,
        "running": running,
        "heartbeat_ms": now_ms,
        "ttl_ms": ttl_ms,
        "all_topics": all_topics,
        "version": horae_version(),
    }
    if stopping:
        entry["stopping"] = True
    return json.dumps(entry, separators=(",", ":"))


def check_worker_id(worker_id: object) -> str:
    """The id of a worker to act on (as `horae workers list` lists it).

    Any other string is looked up like a job id (check_job_ref): one that no live worker has,
    control characters included, is simply not found.

    Raises:
        ScheduleError: naming worker_id, for anything but a non-empty string.
    """
    if not isinstance(worker_id, str) or not worker_id:
        raise ScheduleError(
            "worker_id must be a non-empty string, a worker's id as `horae workers list` lists "
            f"it; got {shown(worker_id)}",
            field="worker_id",
        )
    return worker_id


def listener_app(listeners: Iterable[object]) -> str:
    """The module(s) of a topic's listeners: which app served the topic (`horae topics`)."""
    return ",".join(dict.fromkeys(getattr(fn, "__module__", None) or "?" for fn in listeners))


def live_workers(entries: Mapping[str, str], now_ms: int) -> list[WorkerInfo]:
    """The entries whose heartbeat is younger than their TTL, by id (unreadable ones skipped)."""
    out = []
    for worker_id, raw in sorted(entries.items()):
        try:
            e = json.loads(raw)
            if int(e["heartbeat_ms"]) + int(e["ttl_ms"]) <= now_ms:
                continue
            drain_ms = e.get("drain_ms")
            out.append(
                WorkerInfo(
                    id=worker_id,
                    host=str(e["host"]),
                    pid=int(e["pid"]),
                    topics=tuple(e["topics"]),
                    concurrency=int(e["concurrency"]),
                    running=int(e["running"]),
                    last_heartbeat=ms_to_utc(int(e["heartbeat_ms"])),
                    all_topics=bool(e["all_topics"]),
                    state=DRAINING
                    if drain_ms is not None or e.get("stopping") is True
                    else RUNNING,
                    drain_requested_at=ms_to_utc(int(drain_ms)) if drain_ms is not None else None,
                    version=str(e.get("version") or ""),
                )
            )
        except (ValueError, KeyError, TypeError):
            continue
    return out
