"""audit/relay/stream.py's connections on a private Redis (exact client counts): a
consumer keeps its own until aclose(); an observer call (lag, flush) holds none
afterwards, because AuditTrail never closes the stream it observes with."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis.asyncio as aioredis

from audit.relay.stream import GROUP, OutboxStream
from tests.integration.engine_fixtures import eventually
from tests.integration.test_wire import private_server  # noqa: F401  (a fixture)


async def test_observers_connect_for_the_call_and_consumers_until_aclose(
    private_server: Path,  # noqa: F811  (the imported fixture)
) -> None:
    client = aioredis.Redis.from_url(f"unix://:s3cret@{private_server}")
    try:
        await client.ping()
        alone = len(await client.client_list())

        async def clients(n: int) -> bool:
            return len(await client.client_list()) == alone + n

        observer = OutboxStream(client, "obs", consumer="flush")
        await client.xadd(observer.key, {"e": "scheduled", "id": "j", "ts": "1"})
        await client.xgroup_create(observer.key, GROUP, id="0")
        assert (await observer.lag()).pending == 1
        with pytest.raises(TimeoutError, match="1 outbox events not yet committed"):
            await observer.wait_committed(timeout=0.05)
        await eventually(lambda: clients(0), what="the observer's connections closed")

        consumer = OutboxStream(client, "obs", consumer="c1")
        entries = await consumer.read(10, None)
        assert [e.fields for e in entries] == [{"e": "scheduled", "id": "j", "ts": "1"}]
        await consumer.ack([e.stream_id for e in entries])
        assert await consumer.pending_of_self() == 0
        await eventually(lambda: clients(2), what="the consumer's two connections")
        await observer.wait_committed(timeout=5)
        await consumer.aclose()
        await eventually(lambda: clients(0), what="the consumer's connections closed")
    finally:
        await client.aclose()
