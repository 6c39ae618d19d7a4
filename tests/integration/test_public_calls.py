"""Every public call fails the same way. With Redis down (a server that went away under a
connected Scheduler: a TCP path to the real one, closed) every Scheduler method raises
StorageError; with PostgreSQL down every audit read raises AuditUnavailable (a StorageError):
never a driver's own exception. The same walk with None or a wrongly typed id or name is a
ScheduleError naming the argument, with nothing written. Each table is checked against the
public names it walks (introspection), so a new method cannot be forgotten.
The CLI's and the console API's walks are test_public_calls_cli.py and test_public_calls_http.py."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
import redis.asyncio as aioredis

from audit.reader import AuditTrail
from horae.settings import load_settings
from listeners import ListenerRegistry
from scheduler.api import Scheduler
from scheduler.core.errors import AuditUnavailable, ScheduleError, StorageError
from scheduler.core.flow_tree import Flow
from scheduler.core.stats import Stats, TopicStats
from scheduler.core.topic_options import TopicOptions
from scheduler.store.reads import COUNT_KEYS
from tests.chaos.proxy import FaultProxy

NOW = datetime(2030, 1, 1, tzinfo=UTC)
Call = Callable[[Scheduler], Awaitable[Any]]


async def _connect_another(s: Scheduler) -> None:
    other = Scheduler(settings=s.settings, listeners=ListenerRegistry())
    try:
        await other.connect()
    finally:
        await other.close()


async def _run_worker(s: Scheduler) -> None:
    async with s.worker(topics=["t/x"]):
        pass


# Every public method of Scheduler that reaches a server, with arguments it accepts.
CALLS: dict[str, Call] = {
    "schedule": lambda s: s.schedule("t/x", NOW),
    "schedule_at": lambda s: s.schedule_at("t/x", NOW),
    "schedule_in": lambda s: s.schedule_in("t/x", 60),
    "schedule_many": lambda s: s.schedule_many([{"topic": "t/x"}]),
    "schedule_cron": lambda s: s.schedule_cron("n/x", "* * * * *", topic="t/x"),
    "delete_cron": lambda s: s.delete_cron("n/x"),
    "pause_cron": lambda s: s.pause_cron("n/x"),
    "resume_cron": lambda s: s.resume_cron("n/x"),
    "list_crons": lambda s: s.list_crons(),
    "get_cron": lambda s: s.get_cron("n/x"),
    "get_job": lambda s: s.get_job("j/x"),
    "flow": lambda s: s.flow(Flow("t/x", children=[Flow("t/x")])),
    "get_flow": lambda s: s.get_flow("j/x"),
    "wait": lambda s: s.wait("j/x", timeout=5),
    "wait_many": lambda s: s.wait_many(["j/x"], timeout=5),
    "cancel": lambda s: s.cancel("j/x"),
    "cancel_many": lambda s: s.cancel_many(["j/x", "j/y"]),
    "retry": lambda s: s.retry("j/x"),
    "reschedule": lambda s: s.reschedule("j/x", NOW),
    "delete": lambda s: s.delete("j/x"),
    "replay": lambda s: s.replay("j/x"),
    "stats": lambda s: s.stats(),
    "stats_by_topic": lambda s: s.stats_by_topic(),
    "configure_topic": lambda s: s.configure_topic("t/x", TopicOptions()),
    "get_topic": lambda s: s.get_topic("t/x"),
    "list_topics": lambda s: s.list_topics(),
    "delete_topic": lambda s: s.delete_topic("t/x"),
    "known_topics": lambda s: s.known_topics(),
    "forget_topic": lambda s: s.forget_topic("t/x"),
    "blocked_keys": lambda s: s.blocked_keys("t/x"),
    "dead_letters": lambda s: s.dead_letters("t/x"),
    "purge_dead_letters": lambda s: s.purge_dead_letters("t/x"),
    "jobs": lambda s: s.jobs(),
    "workers": lambda s: s.workers(),
    "drain_worker": lambda s: s.drain_worker("w/x"),
    "connect": _connect_another,
    "worker": _run_worker,
}
# Public names that reach no server, each with the reason.
NO_SERVER = {
    "acting_as": "sets the actor of a block",
    "make_worker": "builds a Worker; starting it is the `worker` row",
    "audit": "the AuditTrail: AUDIT_* below",
    "store": "the connected store (property)",
    "clock": "the calibrated clock (property)",
}
# Public names that must not fail while a server is down (test_close_and_start_relay_stay_up).
STAY_UP = {
    "close": "closing never needs a server",
    "start_relay": (
        "the relay retries in the background until its servers answer (workers keep running)"
    ),
}
# Deprecated aliases kept for one release -> the name that replaces them
# (test_a_deprecated_alias_warns_and_still_works).
DEPRECATED = {
    "unschedule": "delete_cron",
}

# AuditTrail's public methods: reads of PostgreSQL, reads of Redis (the outbox), and the rest.
AUDIT_PG: dict[str, Callable[[AuditTrail], Awaitable[Any]]] = {
    "get": lambda a: a.get("j/x"),
    "attempts": lambda a: a.attempts("j/x"),
    "events": lambda a: a.events("j/x"),
    "failures": lambda a: a.failures(),
    "record_action": lambda a: a.record_action("me", "operator", "cancel", "j/x", "done"),
    "actions": lambda a: a.actions(),
    "finished_since": lambda a: a.finished_since(NOW),
    "failure_baseline": lambda a: a.failure_baseline(date(2030, 1, 1), date(2030, 1, 2)),
    "rollups": lambda a: a.rollups(NOW, True, "t/x"),
    "failure_errors": lambda a: a.failure_errors("t/x", NOW, 10),
    "statuses": lambda a: a.statuses(["j/x"]),
    "by_id_prefix": lambda a: a.by_id_prefix("j/"),
    "flush": lambda a: a.flush(timeout=1),  # an event is waiting: it cannot commit
}
AUDIT_REDIS: dict[str, Callable[[AuditTrail], Awaitable[Any]]] = {
    "flush": lambda a: a.flush(timeout=1),
    "lag": lambda a: a.lag(),
}
AUDIT_STAY_UP = {
    "open": "PostgreSQL down at start is logged, the relay migrates later",
    "close": "no server needed",
}


def public_names(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_the_tables_cover_every_public_name() -> None:
    assert public_names(Scheduler) == set(CALLS) | set(NO_SERVER) | set(STAY_UP) | set(DEPRECATED)
    assert set(DEPRECATED.values()) <= set(CALLS)
    assert public_names(AuditTrail) == set(AUDIT_PG) | set(AUDIT_REDIS) | set(AUDIT_STAY_UP)
    for name in NO_SERVER:  # no coroutine hides there
        assert not inspect.iscoroutinefunction(getattr(Scheduler, name, None)), name


def _through(url: str, port: int) -> str:
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k not in ("host", "port")])
    return parts._replace(
        netloc=(f"{user}@" if user else "") + f"127.0.0.1:{port}", query=query
    ).geturl()


async def _proxy(url: str, default_port: int) -> FaultProxy:
    """A path to the server of `url` that the test can cut: TCP, or the unix socket of a DSN's
    `host=/dir` query (the embedded PostgreSQL), forwarded from 127.0.0.1."""
    parts = urlsplit(url)
    host = parts.hostname or dict(parse_qsl(parts.query)).get("host", "")
    assert host, f"no server to cut the path to: {url}"
    proxy = FaultProxy("path", host, parts.port or default_port)
    await proxy.start()
    return proxy


@pytest.fixture
async def redis_gone(redis_url: str, namespace: str) -> AsyncIterator[Scheduler]:
    """A Scheduler (no audit relay) connected to Redis, which then goes away: port closed."""
    proxy = await _proxy(redis_url, 6379)
    settings = load_settings(
        path=None, env={}, redis_url=_through(redis_url, proxy.port), namespace=namespace
    )
    settings = settings.model_copy(
        update={"audit": settings.audit.model_copy(update={"relay": False})}
    )
    s = Scheduler(settings=settings, listeners=ListenerRegistry())
    await s.connect()
    await proxy.close()
    yield s
    await s.close()


@pytest.fixture
async def audited(
    redis_url: str, database_url: str, namespace: str
) -> AsyncIterator[tuple[Scheduler, FaultProxy, FaultProxy]]:
    """A Scheduler with the audit on, reaching Redis and PostgreSQL through paths the test cuts;
    one job scheduled (an outbox event that no relay has committed)."""
    rp, pp = await _proxy(redis_url, 6379), await _proxy(database_url, 5432)
    settings = load_settings(
        path=None,
        env={},
        redis_url=_through(redis_url, rp.port),
        database_url=_through(database_url, pp.port),
        namespace=namespace,
    )
    s = Scheduler(settings=settings, listeners=ListenerRegistry())
    await s.connect()
    await s.schedule_in("t/x", 3600)
    yield s, rp, pp
    await s.close()
    await rp.close()
    await pp.close()


def _assert_ours(exc: BaseException, kind: type[Exception]) -> None:
    assert isinstance(exc, kind), f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    assert type(exc).__module__.split(".")[0] in ("scheduler", "audit") and str(exc), repr(exc)


@pytest.mark.parametrize("name", sorted(CALLS))
async def test_with_redis_down_every_call_raises_storage_error(
    redis_gone: Scheduler, name: str
) -> None:
    with pytest.raises(Exception) as caught:
        await asyncio.wait_for(CALLS[name](redis_gone), 20)
    _assert_ours(caught.value, StorageError)


@pytest.mark.parametrize("name", sorted(AUDIT_PG))
async def test_with_postgres_down_every_audit_read_raises_audit_unavailable(
    audited: tuple[Scheduler, FaultProxy, FaultProxy], name: str
) -> None:
    s, _, pg = audited
    await pg.close()
    with pytest.raises(Exception) as caught:
        await asyncio.wait_for(AUDIT_PG[name](s.audit), 20)
    _assert_ours(caught.value, AuditUnavailable)


@pytest.mark.parametrize("name", sorted(AUDIT_REDIS))
async def test_with_redis_down_the_audit_outbox_reads_raise_storage_error(
    audited: tuple[Scheduler, FaultProxy, FaultProxy], name: str
) -> None:
    s, rp, _ = audited
    await rp.close()
    with pytest.raises(Exception) as caught:
        await asyncio.wait_for(AUDIT_REDIS[name](s.audit), 20)
    _assert_ours(caught.value, StorageError)


async def test_close_and_start_relay_stay_up(
    audited: tuple[Scheduler, FaultProxy, FaultProxy],
) -> None:
    s, rp, pp = audited
    await rp.close()
    await pp.close()
    await asyncio.wait_for(s.start_relay(), 20)
    await asyncio.wait_for(s.close(), 20)
    await asyncio.wait_for(s.audit.close() if s._audit else asyncio.sleep(0), 5)


# ----------------------------------------------------------------------------- bad ids and names
BAD = [None, 5, ["a"], {"a": 1}]  # for a str parameter (None: only where None means nothing else)
BAD_INT = ["5", None, [5], {"a": 5}]  # for an int parameter


def _kw(
    call: Callable[..., Awaitable[Any]], **fixed: Any
) -> Callable[[Scheduler, str, Any], Awaitable[Any]]:
    return lambda s, param, value: call(s, **{**fixed, param: value})


# method -> (a call taking the parameter by keyword, {parameter: (bad values, the field named)})
WALK: dict[
    str, tuple[Callable[[Scheduler, str, Any], Awaitable[Any]], dict[str, tuple[list[Any], str]]]
] = {
    "schedule": (
        _kw(lambda s, **k: s.schedule(**k), topic="t/x", run_at=NOW),
        {
            "topic": (BAD, "topic"),
            "job_id": (BAD[1:], "job_id"),
            "dead_letter": (BAD[1:], "dead_letter"),
            "key": (BAD[1:], "key"),
            "tz": (BAD, "tz"),
        },
    ),
    "schedule_at": (
        _kw(lambda s, **k: s.schedule_at(**k), topic="t/x", run_at=NOW),
        {"topic": (BAD, "topic"), "job_id": (BAD[1:], "job_id"), "tz": (BAD, "tz")},
    ),
    "schedule_in": (
        _kw(lambda s, **k: s.schedule_in(**k), topic="t/x", delay=60),
        {"topic": (BAD, "topic"), "job_id": (BAD[1:], "job_id"), "key": (BAD[1:], "key")},
    ),
    "schedule_many": (
        _kw(lambda s, **k: s.schedule_many([{"topic": "t/x", **k}])),
        {"topic": (BAD, "items[0].topic"), "job_id": (BAD[1:], "items[0].job_id")},
    ),
    "schedule_cron": (
        _kw(lambda s, **k: s.schedule_cron(**k), name="n/x", cron="* * * * *", topic="t/x"),
        {
            "name": (BAD, "name"),
            "cron": (BAD, "cron"),
            "topic": (BAD, "topic"),
            "tz": (BAD, "tz"),
            "key": (BAD[1:], "key"),
        },
    ),
    "delete_cron": (_kw(lambda s, **k: s.delete_cron(**k)), {"name": (BAD, "name")}),
    "pause_cron": (_kw(lambda s, **k: s.pause_cron(**k)), {"name": (BAD, "name")}),
    "resume_cron": (_kw(lambda s, **k: s.resume_cron(**k)), {"name": (BAD, "name")}),
    "get_cron": (_kw(lambda s, **k: s.get_cron(**k)), {"name": (BAD, "name")}),
    "get_job": (_kw(lambda s, **k: s.get_job(**k)), {"job_id": (BAD, "job_id")}),
    "flow": (
        _kw(lambda s, **k: s.flow(Flow(children=[Flow("t/x")], **k)), topic="t/x"),
        {"topic": (BAD, "topic"), "job_id": (BAD[1:], "job_id"), "key": (BAD[1:], "key")},
    ),
    "flow[]": (
        _kw(lambda s, **k: s.flow(Flow("t/x", children=[Flow(**k)])), topic="t/x"),
        {"topic": (BAD, "children[0].topic"), "job_id": (BAD[1:], "children[0].job_id")},
    ),
    "get_flow": (_kw(lambda s, **k: s.get_flow(**k)), {"root_id": (BAD, "root_id")}),
    "wait": (_kw(lambda s, **k: s.wait(**k), timeout=1), {"job_id": (BAD, "job_id")}),
    "wait_many": (
        _kw(lambda s, **k: s.wait_many(**k), timeout=1),
        {"job_ids": ([None, 5, "ab"], "job_ids")},
    ),
    "wait_many[]": (
        _kw(lambda s, v: s.wait_many(["j/x", v], timeout=1)),
        {"v": (BAD, "job_ids[1]")},
    ),
    "cancel": (
        _kw(lambda s, **k: s.cancel(**k), job_id="j/x"),
        {"job_id": (BAD, "job_id"), "actor": (BAD[1:], "actor")},
    ),
    "cancel_many": (
        _kw(lambda s, **k: s.cancel_many(**k), ids=["j/x"]),
        {"ids": ([None, 5, "ab", {"a": 1}], "ids"), "actor": (BAD[1:], "actor")},
    ),
    "cancel_many[]": (_kw(lambda s, v: s.cancel_many(["j/x", v])), {"v": (BAD, "ids[1]")}),
    "retry": (
        _kw(lambda s, **k: s.retry(**k), job_id="j/x"),
        {"job_id": (BAD, "job_id"), "actor": (BAD[1:], "actor")},
    ),
    "reschedule": (
        _kw(lambda s, **k: s.reschedule(**k), job_id="j/x", run_at=NOW),
        {"job_id": (BAD, "job_id"), "actor": (BAD[1:], "actor"), "tz": (BAD, "tz")},
    ),
    "delete": (
        _kw(lambda s, **k: s.delete(**k), job_id="j/x"),
        {"job_id": (BAD, "job_id"), "actor": (BAD[1:], "actor")},
    ),
    "replay": (
        _kw(lambda s, **k: s.replay(**k), job_id="j/x"),
        {"job_id": (BAD, "job_id"), "actor": (BAD[1:], "actor")},
    ),
    "stats": (_kw(lambda s, **k: s.stats(**k)), {"topic": (BAD[1:], "topic")}),
    "configure_topic": (
        _kw(lambda s, **k: s.configure_topic(**k), name="t/x", options=TopicOptions()),
        {"name": (BAD, "name"), "options": (BAD, "options")},
    ),
    "get_topic": (_kw(lambda s, **k: s.get_topic(**k)), {"name": (BAD, "name")}),
    "delete_topic": (
        _kw(lambda s, **k: s.delete_topic(**k), name="t/x"),
        {"name": (BAD, "name"), "force": (["yes", None, 1], "force")},
    ),
    "blocked_keys": (_kw(lambda s, **k: s.blocked_keys(**k)), {"topic": (BAD, "topic")}),
    "forget_topic": (_kw(lambda s, **k: s.forget_topic(**k)), {"topic": (BAD, "topic")}),
    "dead_letters": (
        _kw(lambda s, **k: s.dead_letters(**k), topic="t/x"),
        {"topic": (BAD, "topic"), "limit": (BAD_INT, "limit"), "cursor": (BAD[1:], "cursor")},
    ),
    "purge_dead_letters": (
        _kw(lambda s, **k: s.purge_dead_letters(**k), topic="t/x"),
        {"topic": (BAD, "topic"), "actor": (BAD[1:], "actor")},
    ),
    "jobs": (
        _kw(lambda s, **k: s.jobs(**k)),
        {
            "topic": (BAD[1:], "topic"),
            "state": (BAD[1:], "state"),
            "key": (BAD[1:], "key"),
            "limit": (BAD_INT, "limit"),
            "cursor": (BAD[1:], "cursor"),
        },
    ),
    "drain_worker": (
        _kw(lambda s, **k: s.drain_worker(**k)),
        {"worker_id": (BAD + [""], "worker_id")},
    ),
    "acting_as": (_kw(lambda s, **k: _acting(s, **k)), {"actor": (BAD, "actor")}),
}
# Public methods with no id or name parameter (each with the reason).
NO_ID = {
    "list_crons",
    "stats_by_topic",
    "list_topics",
    "known_topics",
    "workers",
    "connect",
    "close",
    "start_relay",
    "make_worker",
    "worker",
    "audit",
    "store",
    "clock",
}


async def _acting(s: Scheduler, actor: Any) -> None:
    with s.acting_as(actor):
        pass


def test_the_walk_covers_every_public_method() -> None:
    walked = {name.removesuffix("[]") for name in WALK}
    assert walked | NO_ID == public_names(Scheduler) - set(DEPRECATED) and not walked & NO_ID


async def _shape(redis: aioredis.Redis, namespace: str) -> dict[str, Any]:
    out = {}
    async for key in redis.scan_iter(match="{" + namespace + "}:*"):
        kind = (await redis.type(key)).decode()
        out[key] = (kind, await redis.dump(key) if kind != "stream" else await redis.xlen(key))
    return out


@pytest.fixture
async def live(redis_url: str, namespace: str) -> AsyncIterator[Scheduler]:
    settings = load_settings(path=None, env={}, redis_url=redis_url, namespace=namespace)
    settings = settings.model_copy(
        update={"audit": settings.audit.model_copy(update={"relay": False})}
    )
    async with Scheduler(settings=settings, listeners=ListenerRegistry()) as s:
        await s.schedule_in("t/x", 3600, job_id="j/x")  # something to act on, were a check missing
        await s.schedule_cron("n/x", "0 3 * * *", topic="t/x")
        yield s


@pytest.mark.parametrize("method", sorted(WALK))
async def test_a_bad_id_or_name_is_refused_by_name_and_writes_nothing(
    live: Scheduler, redis: aioredis.Redis, namespace: str, method: str
) -> None:
    call, params = WALK[method]
    before = await _shape(redis, namespace)
    wrong = []
    for param, (values, field) in params.items():
        for value in values:
            try:
                await asyncio.wait_for(call(live, param, value), 10)
            except ScheduleError as exc:
                if exc.field != field or not str(exc):
                    wrong.append(f"{param}={value!r}: field {exc.field!r} ({exc})")
            except Exception as exc:  # noqa: BLE001 - what the walk reports
                wrong.append(
                    f"{param}={value!r}: {type(exc).__module__}.{type(exc).__name__}: {exc}"
                )
            else:
                wrong.append(f"{param}={value!r}: accepted")
    assert wrong == []
    assert await _shape(redis, namespace) == before, "nothing is written"


async def test_ids_topics_and_names_with_a_slash_round_trip(live: Scheduler) -> None:
    s = live
    info = await s.get_job("j/x")
    assert info is not None and (info.id, info.topic) == ("j/x", "t/x")
    assert [j.id for j in (await s.jobs(topic="t/x")).items] == ["j/x"]
    assert (await s.stats(topic="t/x"))["scheduled"] == 1
    assert "t/x" in await s.stats_by_topic()
    cron = await s.get_cron("n/x")
    assert cron is not None and (cron.name, cron.topic) == ("n/x", "t/x")
    assert await s.pause_cron("n/x") is True and await s.resume_cron("n/x") is True
    assert await s.delete_cron("n/x") is True and await s.get_cron("n/x") is None
    await s.configure_topic("a/b", TopicOptions(dead_letter="a/b/dead"))
    assert "a/b" in await s.list_topics()
    got = await s.get_topic("a/b")
    assert got is not None and got.dead_letter == "a/b/dead"
    assert await s.reschedule("j/x", NOW) is True
    assert await s.cancel("j/x") is True and await s.retry("j/x") is True
    assert await s.cancel_many(["j/x"]) == 1 and await s.delete("j/x") is True
    assert await s.get_job("j/x") is None
    assert await s.delete_topic("a/b") is True


# A check per DEPRECATED alias: what it does, called by its old name.
ALIASED: dict[str, Callable[[Scheduler], Awaitable[Any]]] = {
    "unschedule": lambda s: s.unschedule("n/x"),
}


async def test_a_deprecated_alias_warns_and_still_works(live: Scheduler) -> None:
    assert set(ALIASED) == set(DEPRECATED)
    with pytest.warns(DeprecationWarning) as caught:
        assert await ALIASED["unschedule"](live) is True
    [warned] = caught
    assert str(warned.message) == (
        "Scheduler.unschedule is deprecated and will be removed in the next release; "
        "use Scheduler.delete_cron"
    )
    assert warned.filename == __file__, "the warning points at the caller"
    assert await live.get_cron("n/x") is None
    with pytest.warns(DeprecationWarning, match="use Scheduler.delete_cron"):
        assert await live.unschedule("n/x") is False


async def test_stats_are_typed_and_still_a_dict(live: Scheduler) -> None:
    stats = await live.stats(topic="t/x")
    assert isinstance(stats, Stats) and isinstance(stats, dict)
    assert stats.scheduled == stats["scheduled"] == stats.get("scheduled") == 1
    assert stats == {**dict.fromkeys(COUNT_KEYS, 0), "scheduled": 1} and stats.total == 1
    assert json.loads(json.dumps(stats)) == stats
    by_topic = await live.stats_by_topic()
    assert isinstance(by_topic, TopicStats) and isinstance(by_topic["t/x"], Stats)
    assert by_topic["t/x"] == stats and by_topic == {"t/x": stats}


async def test_a_job_with_slashes_runs_and_is_waited_for(redis_url: str, namespace: str) -> None:
    reg, seen = ListenerRegistry(), []

    @reg.on_event("orders/eu/paid")
    async def paid(event: Any) -> None:
        seen.append((event.scheduled_job_id, event.topic))

    settings = load_settings(path=None, env={}, redis_url=redis_url, namespace=namespace)
    settings = settings.model_copy(
        update={"audit": settings.audit.model_copy(update={"relay": False})}
    )
    async with Scheduler(settings=settings, listeners=reg) as s, s.worker():
        job_id = await s.schedule_in("orders/eu/paid", 0, job_id="order/42/paid")
        info = await s.wait(job_id, timeout=10)
    assert info.state.value == "completed" and seen == [("order/42/paid", "orders/eu/paid")]
