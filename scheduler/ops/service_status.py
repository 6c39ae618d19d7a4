"""`horae services status`: the config file and data directory in use, and for each
server the URL checked: embedded ones from their state files, ones given by URL by
connecting to them (reachable or not; a Redis Cluster node by node: cluster_status.py);
nothing is started."""

from __future__ import annotations

import asyncio
from pathlib import Path

from scheduler.core.config import Settings
from scheduler.core.datadir import data_dir_of
from scheduler.core.procutil import hide_password, scrub
from scheduler.ops.cluster_status import cluster_status_lines
from scheduler.store.clients import sync_client, uses_cluster

PROBE_TIMEOUT_S = 3.0


def status_lines(settings: Settings, config: Path | None) -> list[str]:
    """One line each: config, data directory, redis, postgres (passwords hidden)."""
    from scheduler.ops.servers import status

    data_dir = data_dir_of(settings)
    embedded = status(data_dir)
    shown = (
        str(config)
        if config is not None and config.is_file()
        else "none (defaults and HORAE_* variables)"
    )
    lines = [f"config: {shown}", f"data directory: {data_dir}"]
    for name, url, probe in (
        ("redis", settings.redis_url, probe_redis),
        ("postgres", settings.database_url, probe_postgres),
    ):
        if url and name == "redis" and uses_cluster(url, settings):
            first, *rest = cluster_status_lines(
                url, settings.namespace, settings.cluster.partitions
            )
            lines += [
                scrub(f"{name}: external {hide_password(url)}: {first}", url),
                *(scrub(x, url) for x in rest),
            ]
        elif url:
            lines.append(
                f"{name}: external {hide_password(url)}: {scrub(probe(url), url)}"
            )  # a driver may echo it
        elif embedded[name] == "stopped":
            lines.append(f"{name}: embedded, stopped (starts on first use under {data_dir / name})")
        else:
            lines.append(f"{name}: embedded, {embedded[name]}")
    return lines


def probe_redis(url: str) -> str:
    """'reachable' when the server answers PING, else why not."""
    import redis

    try:
        with sync_client(url, timeout_s=PROBE_TIMEOUT_S) as client:
            client.ping()
    except (redis.AuthenticationError, redis.ResponseError) as exc:  # it answered: the URL is wrong
        return f"answers, but refuses ({type(exc).__name__}: {exc})"
    except (redis.RedisError, OSError, ValueError) as exc:
        return f"unreachable ({type(exc).__name__}: {exc})"
    return "reachable"


def probe_postgres(url: str) -> str:
    """'reachable' when a connection opens (credentials and database included), else why not."""
    import asyncpg

    async def connect() -> None:
        conn = await asyncpg.connect(url, timeout=PROBE_TIMEOUT_S)
        await conn.close()

    try:
        asyncio.run(connect())
    except asyncpg.PostgresError as exc:  # the server answered: wrong database, user or password
        return f"answers, but refuses ({type(exc).__name__}: {exc})"
    except (TimeoutError, asyncpg.InterfaceError, OSError, ValueError) as exc:
        return f"unreachable ({type(exc).__name__}: {exc})"
    return "reachable"
