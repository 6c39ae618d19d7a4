"""Two projects' embedded Redis servers never fight for a port (issue 29): a port taken
between the check and redis-server's bind is given up at once for another free one, and a
previous port now held by another server is not waited for."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from scheduler.ops import servers


@pytest.fixture
def listener() -> Iterator[int]:
    """A port some other process (here: us) listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "data"
    servers.stop_all(tmp_path / "data")


def test_a_port_taken_before_the_bind_is_given_up_for_another(
    listener: int, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_free_port = servers.free_port
    offered = iter([listener])  # the free port we picked is taken by the time redis-server binds
    monkeypatch.setattr(servers, "free_port", lambda: next(offered, None) or real_free_port())
    started = time.monotonic()

    url = servers.ensure_redis(data_dir)

    assert time.monotonic() - started < servers.START_TIMEOUT / 2, (
        "waited for a port it could not bind"
    )
    assert url != f"redis://127.0.0.1:{listener}/0"
    with redis.Redis.from_url(url) as client:
        assert client.ping()


def test_a_previous_port_held_by_another_server_is_not_waited_for(
    listener: int, data_dir: Path
) -> None:
    (data_dir / "redis").mkdir(parents=True)
    (data_dir / "redis" / "state.json").write_text(
        f'{{"pid": 99999999, "port": {listener}}}'
    )  # its server is gone
    started = time.monotonic()

    url = servers.ensure_redis(data_dir)

    assert time.monotonic() - started < 1.5, "waited for another server's port to free up"
    assert url != f"redis://127.0.0.1:{listener}/0"


def test_a_new_port_lies_below_the_ephemeral_range() -> None:
    """No outgoing connection can draw an embedded server's port as its own, so a killed
    server takes the same port again (clients keep their URL)."""
    low, _ = servers._ephemeral_range()
    ports = {servers.free_port() for _ in range(20)}
    assert all(1024 <= p < low for p in ports), ports
