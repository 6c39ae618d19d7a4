"""Size limits with clear errors (issue 16, Security): topic, job id, key, dedupe key and
schedule name lengths, payload and metadata JSON size (`[limits] json_bytes`, here set
low) are refused naming the field, the size and the limit, and a refused call writes
nothing at all (the namespace's keyspace stays empty); a topic takes at most
`max_per_topic` listeners. Payloads are JSON: nothing in the packages unpickles."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from listeners import ListenerRegistry
from listeners.registry import MAX_LISTENERS_PER_TOPIC
from scheduler import Dedupe, ScheduleError
from scheduler.core.validation import MAX_ID_LEN, MAX_KEY_LEN, MAX_TOPIC_LEN
from tests.integration.engine_fixtures import make_scheduler, ns_keys

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 2_048  # [limits] json_bytes of these tests

OVERSIZED = [
    ("topic", str(MAX_TOPIC_LEN), lambda s: s.schedule_in("t" * (MAX_TOPIC_LEN + 1), 0)),
    ("job_id", str(MAX_ID_LEN), lambda s: s.schedule_in("t", 0, job_id="j" * (MAX_ID_LEN + 1))),
    ("key", str(MAX_KEY_LEN), lambda s: s.schedule_in("t", 0, key="k" * (MAX_KEY_LEN + 1))),
    ("dedupe.key", "512", lambda s: s.schedule_in("t", 0, dedupe=Dedupe("d" * 513))),
    (
        "name",
        str(MAX_ID_LEN),
        lambda s: s.schedule_cron("c" * (MAX_ID_LEN + 1), "* * * * *", topic="t"),
    ),
    ("payload", f"{LIMIT:,}", lambda s: s.schedule_in("t", 0, payload={"x": "y" * LIMIT})),
    ("metadata", f"{LIMIT:,}", lambda s: s.schedule_in("t", 0, metadata={"x": "y" * LIMIT})),
    (
        "payload",
        f"{LIMIT:,}",
        lambda s: s.schedule_cron("c", "* * * * *", topic="t", payload="y" * LIMIT),
    ),
    (
        "items[1].payload",
        f"{LIMIT:,}",
        lambda s: s.schedule_many([{"topic": "t"}, {"topic": "t", "payload": "y" * LIMIT}]),
    ),
]


@pytest.mark.parametrize(
    ("field", "limit", "call"), OVERSIZED, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(OVERSIZED)]
)
async def test_oversized_input_is_refused_naming_field_and_limit_and_writes_nothing(
    redis_url: str, namespace: str, redis: Any, field: str, limit: str, call: Any
) -> None:
    async with make_scheduler(
        redis_url, namespace, ListenerRegistry(), limits={"json_bytes": LIMIT}
    ) as s:
        with pytest.raises(ScheduleError) as info:
            await call(s)
        assert info.value.field == field and limit in str(info.value), str(info.value)
        assert await ns_keys(redis, namespace) == [], "a refused call writes nothing"
        await s.schedule_in(
            "t", 0, payload="y" * (LIMIT - 100)
        )  # (the limit is a limit, not a ban)
        assert await ns_keys(redis, namespace) != []


def test_a_topic_takes_at_most_max_per_topic_listeners() -> None:
    reg = ListenerRegistry()
    functions = [(lambda n: lambda event: n)(n) for n in range(MAX_LISTENERS_PER_TOPIC + 1)]
    for fn in functions[:-1]:
        reg.add("busy", fn)
    with pytest.raises(
        ValueError, match=rf"'busy' has {MAX_LISTENERS_PER_TOPIC} listeners already.*max_per_topic"
    ):
        reg.on_event("busy")(functions[-1])
    assert len(reg.listeners("busy")) == MAX_LISTENERS_PER_TOPIC, "nothing was added"
    reg.add("busy", functions[0])  # the same function again is still a no-op, not an error
    small = ListenerRegistry(max_per_topic=1)
    small.add("one", functions[0])
    with pytest.raises(ValueError, match="max_per_topic=1"):
        small.add("one", functions[1])
    with pytest.raises(ValueError, match="at least 1"):
        ListenerRegistry(max_per_topic=0)


# Anything that turns bytes or text into code or arbitrary objects. Payloads, metadata, errors
# and outbox events are JSON; a listener's payload schema parses JSON values.
UNSAFE = re.compile(
    r"\b(import\s+(pickle|cPickle|marshal|shelve|dill|cloudpickle)\b|from\s+(pickle|marshal|shelve)"
    r"\s+import|pickle\.|marshal\.|shelve\.|yaml\.load\(|yaml\.unsafe_load|"
    r"(?<![.\w])eval\(|(?<![.\w])exec\(|__import__\()"
)


# The one exception: a worker and the listener child processes it spawns itself
# (executor="process") talk pickle over the child's own stdin/stdout pipes. Nothing read from
# Redis, PostgreSQL or a socket is unpickled: the parent pickles the event it built, the child
# (running the application's own listener code) pickles its exception.
PIPE_TO_OWN_CHILD = {"scheduler/worker/process_pool.py", "scheduler/worker/process_child.py"}


def test_no_package_unpickles_or_evaluates_code() -> None:
    found = []
    for package in ("scheduler", "listeners", "audit", "horae", "console"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if str(path.relative_to(ROOT)) in PIPE_TO_OWN_CHILD:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if UNSAFE.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == [], "payloads are JSON only; no pickle, marshal, eval or exec:\n" + "\n".join(
        found
    )


def test_the_pickling_modules_reach_no_server() -> None:
    """The pipe modules import no client of Redis, PostgreSQL or the network."""
    client = re.compile(
        r"^\s*(import|from)\s+(redis|asyncpg|socket|httpx|scheduler\.(store|wire|connection))\b"
    )
    for name in PIPE_TO_OWN_CHILD:
        lines = (ROOT / name).read_text().splitlines()
        assert not [line for line in lines if client.search(line)], name


def test_the_unsafe_pattern_catches_what_it_should() -> None:
    for bad in (
        "import pickle",
        "x = pickle.loads(b)",
        "from marshal import loads",
        "eval(text)",
        "exec(code, {})",
        "yaml.load(f)",
        "m = __import__(name)",
    ):
        assert UNSAFE.search(bad), bad
    for fine in (
        "asyncio.create_subprocess_exec(",
        "self.evaluate(x)",
        "conn.execute(q)",
        "retrieval(x)",
    ):
        assert not UNSAFE.search(fine), fine
