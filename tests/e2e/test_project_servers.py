"""One project's embedded servers per project (issue 29): two checkouts of the same
repository on one machine, same user, no config file, run `horae services start` each
and get servers of their own; `horae services stop` in one leaves the other's running.
Real embedded Redis and PostgreSQL, started by the real `horae` command."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.procs import HORAE

pytestmark = pytest.mark.slow


def horae(cwd: Path, env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [str(HORAE), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=90
    )
    assert result.returncode == 0, (
        f"horae {' '.join(args)} in {cwd}:\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout


def status(cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """`horae services status` as {"data directory": ..., "redis": ..., "postgres": ...}."""
    lines = horae(cwd, env, "services", "status").splitlines()
    return dict(line.split(": ", 1) for line in lines)


def pid_of(line: str) -> int:
    match = re.search(r"running at \S+ pid (\d+)$", line)
    assert match, line
    return int(match.group(1))


@pytest.fixture
def checkouts() -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """Two clones named alike (tmp/one/app, tmp/two/app), one user's environment without any
    HORAE_* variable; every server started here is stopped afterwards. A directory of its
    own, not pytest's tmp_path: another pytest run on the machine may delete an older
    basetemp (keeping 3) while servers still run in it, and `services stop` would find none."""
    with tempfile.TemporaryDirectory(prefix="horae-projects-") as name:
        yield from _checkouts(Path(name))


def _checkouts(tmp_path: Path) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    one, two = tmp_path / "one" / "app", tmp_path / "two" / "app"
    for clone in (one, two):
        (clone / ".git").mkdir(parents=True)
        (clone / "src").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HORAE_", "XDG_"))}
    env.update(HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "xdg"))
    try:
        yield one, two, env
    finally:
        for clone in (one, two):
            subprocess.run(
                [str(HORAE), "services", "stop"],
                cwd=clone,
                env=env,
                capture_output=True,
                timeout=60,
            )


def test_two_checkouts_never_share_embedded_servers(
    checkouts: tuple[Path, Path, dict[str, str]],
) -> None:
    one, two, env = checkouts
    horae(one / "src", env, "services", "start")  # from a subdirectory: the same project
    horae(two, env, "services", "start")
    first, second = status(one, env), status(two / "src", env)

    assert first["data directory"] != second["data directory"]
    for name in ("redis", "postgres"):
        assert first[name].startswith("embedded, running at"), first
        assert second[name].startswith("embedded, running at"), second
        assert pid_of(first[name]) != pid_of(second[name]), name
    urls = [re.search(r"running at (\S+)", s["redis"]).group(1) for s in (first, second)]  # type: ignore[union-attr]
    assert urls[0] != urls[1]
    with redis.Redis.from_url(urls[0]) as a, redis.Redis.from_url(urls[1]) as b:
        a.set("written-by", "one")
        assert b.get("written-by") is None, "the second checkout sees the first one's data"

    stopped = horae(one, env, "services", "stop")

    assert str(pid_of(first["redis"])) in stopped and str(pid_of(first["postgres"])) in stopped
    assert (
        str(pid_of(second["redis"])) not in stopped
        and str(pid_of(second["postgres"])) not in stopped
    )
    after = status(two, env)
    assert (pid_of(after["redis"]), pid_of(after["postgres"])) == (
        pid_of(second["redis"]),
        pid_of(second["postgres"]),
    )
    with redis.Redis.from_url(urls[1]) as b:
        assert b.ping()
    gone = status(one, env)
    assert gone["redis"].startswith("embedded, stopped") and gone["postgres"].startswith(
        "embedded, stopped"
    )


def test_checkouts_share_servers_only_when_told_to(
    checkouts: tuple[Path, Path, dict[str, str]],
) -> None:
    one, two, env = checkouts
    horae(one, env, "services", "start")
    shared = {**env, "HORAE_DATA_DIR": status(one, env)["data directory"]}

    assert status(two, shared)["redis"] == status(one, env)["redis"]
    assert status(two, env)["redis"].startswith("embedded, stopped")
