"""The audit is Redis, exactly (issue 33): whatever JSON a job's payload and metadata hold
(integers of any size, either sign; floats; nested lists and objects; any Unicode, astral
characters and characters JSON escapes included), the audit row the real relay writes into
the real PostgreSQL holds the same values as the job's text in Redis.

Compared as JSON values with exact numbers: both texts parsed with every number a Decimal
(jsonb keeps numbers as exact decimals, writing an exponent form out: `1e+300` comes back
as 1 and 300 zeros, the same value). NUL and unpaired surrogates never get this far: the
scheduling API refuses them (tests/integration/test_input_limits.py), as jsonb would.

Budget: 200 examples in CI (derandomized); HYPOTHESIS_PROFILE=long: 2,000.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from audit.options import RelayOptions
from audit.relay.consumer import AuditRelay
from audit.settings import AuditSettings
from listeners import ListenerRegistry
from scheduler import Scheduler
from tests.hypothesis_profiles import budget
from tests.integration.engine_fixtures import make_scheduler, outbox_events

EXAMPLES = budget(200)
RUN_AT = datetime(2030, 1, 1, tzinfo=UTC)  # far ahead: the job only waits

# What the API accepts: every character but NUL and the surrogates (it refuses those).
TEXT = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12
) | st.sampled_from(
    [
        "\U0001f600",
        "\U00010000\U0010ffff",
        '"\\/\b\f\n\r\t',
        "\\u0000 is text",
        "\u2028\u2029",
        "é\u0301",
        "\x7f",
    ]
)
INTEGER = (
    st.integers()
    | st.integers(-(2**200) - 1, 2**200 + 1)
    | st.sampled_from(
        [
            2**64 + 1,
            2**64,
            2**64 - 1,
            2**63,
            -(2**63) - 1,
            -(2**70),
            2**200 + 1,
            -(2**200) - 1,
            10**400,
        ]
    )
)
FLOAT = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0.1, -0.0, 1e300, 5e-324, 1.7976931348623157e308, 2.0**64 + 2**12, 1e-7, 33.333333333333336]
)
LEAF = st.none() | st.booleans() | INTEGER | FLOAT | TEXT
JSON = st.recursive(
    LEAF, lambda c: st.lists(c, max_size=4) | st.dictionaries(TEXT, c, max_size=4), max_leaves=16
)
METADATA = st.dictionaries(TEXT, JSON, max_size=4)


def exact(text: str) -> Any:
    """A JSON text as a comparable value: numbers exact (Decimal, int or float alike), true and
    false kept apart from 1 and 0, lists and objects as themselves."""
    return _canon(json.loads(text, parse_float=Decimal, parse_int=Decimal))


def _canon(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return ("lit", value)
    if isinstance(value, Decimal):
        return ("num", value)  # Decimal("1E+300") == Decimal("1000...0"), -0 == 0
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, list):
        return ("list", [_canon(v) for v in value])
    return ("obj", {k: _canon(v) for k, v in value.items()})


@dataclass
class Env:
    runner: asyncio.Runner
    scheduler: Scheduler
    relay: AuditRelay
    redis: aioredis.Redis
    db: asyncpg.Connection
    namespace: str
    examples: int = 0


@pytest.fixture
def env(redis_url: str, namespace: str, database_url: str) -> Iterator[Env]:
    """A Scheduler (no worker runs) and the real relay, driven step by step, on a loop of their
    own."""
    with asyncio.Runner() as runner:
        s = make_scheduler(redis_url, namespace, ListenerRegistry())
        runner.run(s.connect())
        client = aioredis.Redis.from_url(redis_url)
        options = RelayOptions.from_settings(
            AuditSettings(),
            block_ms=200,
            linger_ms=0,
            claim_idle_ms=60_000,
            connect_timeout_s=5.0,
            command_timeout_s=30.0,
        )
        relay = AuditRelay(client, namespace, database_url, options)
        db = runner.run(asyncpg.connect(database_url))
        e = Env(runner, s, relay, client, db, namespace)
        try:
            yield e
        finally:
            if e.examples:  # the count the report quotes (pytest -s)
                print(f"\naudit == Redis: {e.examples} examples")
            runner.run(db.close())
            runner.run(relay.stop())
            runner.run(client.aclose())
            runner.run(s.close())


async def _round_trip(e: Env, payload: Any, metadata: dict[str, Any]) -> tuple[str, str, str, str]:
    """Schedule one job, relay its `scheduled`; (payload, metadata) as Redis holds them and as
    the audit does."""
    job_id = await e.scheduler.schedule_at("exact", RUN_AT, payload=payload, metadata=metadata)
    # the text enqueue.lua stored in the job and wrote to the outbox (read before the relay trims
    # it)
    [scheduled] = [
        ev for ev in await outbox_events(e.redis, e.namespace, job_id) if ev.type == "scheduled"
    ]
    while (await e.relay.step()) == 0:  # one step may find the stream empty
        pass
    row = await e.db.fetchrow(
        "SELECT payload::text AS payload, metadata::text AS metadata FROM schedule_audit "
        "WHERE id = $1",
        job_id,
    )
    assert row is not None, "the relay wrote no row"
    # a JSON null is stored as SQL NULL (json_to_recordset): AuditRecord.payload None either way
    return (
        scheduled.get("payload"),
        scheduled.get("metadata"),
        row["payload"] or "null",
        row["metadata"],
    )


@settings(
    max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(payload=JSON, metadata=METADATA)
def test_the_audit_holds_payload_and_metadata_exactly(
    env: Env, payload: Any, metadata: dict[str, Any]
) -> None:
    redis_payload, redis_metadata, pg_payload, pg_metadata = env.runner.run(
        _round_trip(env, payload, metadata)
    )
    env.examples += 1
    event(
        "an integer beyond 64 bits"
        if _big(payload) or _big(metadata)
        else "no integer beyond 64 bits"
    )
    assert exact(pg_payload) == exact(redis_payload), (redis_payload, pg_payload)
    assert exact(pg_metadata) == exact(redis_metadata), (redis_metadata, pg_metadata)
    # and Redis holds the caller's value (json.dumps: Python ints and floats exactly)
    assert exact(redis_payload) == exact(json.dumps(payload))


def _big(value: Any) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return not -(2**63) <= value < 2**64
    if isinstance(value, list):
        return any(_big(v) for v in value)
    if isinstance(value, dict):
        return any(_big(v) for v in value.values())
    return False


def test_the_probes_values_are_exact(env: Env) -> None:
    """The probe of issue 33: 2**64+1 came back 18446744073709552000 (orjson read it as a
    double)."""
    payload = {"v": 2**64 + 1, "w": 2**200 + 1, "n": -(2**70), "f": 0.1, "s": "\U0001f600"}
    metadata = {"m": 2**64 + 1, "deep": [{"x": -(2**70)}]}
    _, _, pg_payload, pg_metadata = env.runner.run(_round_trip(env, payload, metadata))
    assert json.loads(pg_payload) == payload and json.loads(pg_metadata) == metadata
