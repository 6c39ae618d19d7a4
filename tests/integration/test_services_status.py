"""`horae services status` prints the config file, the data directory and the URLs it
checks; servers given by URL are reported reachable or not, never "stopped" (issue 19)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from scheduler.cli.main import cli
from scheduler.core.datadir import project_data_dir
from tests.logging_guard import root_logging  # noqa: F401  (a fixture)


@pytest.fixture
def isolated(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    root_logging: None,  # noqa: F811  (the imported fixture)
) -> dict[str, str]:
    """A tmp cwd and a tmp home: nothing is read from or written to the real ones."""
    monkeypatch.chdir(tmp_path)
    for name in ("HORAE_CONFIG", "HORAE_DATA_DIR", "HORAE_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    return {"HOME": str(tmp_path / "home"), "XDG_DATA_HOME": str(tmp_path / "xdg")}


def status(args: list[str], env: dict[str, str]) -> list[str]:
    result = CliRunner().invoke(cli, [*args, "services", "status"], env=env)
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_servers_given_by_url_are_probed(
    isolated: dict[str, str], redis_url: str, server_dsn: str, tmp_path: Path
) -> None:
    lines = status(["--redis-url", redis_url, "--database-url", server_dsn], isolated)

    assert lines[0] == "config: none (defaults and HORAE_* variables)"
    assert lines[1] == f"data directory: {project_data_dir(tmp_path, isolated)}"
    assert lines[2].startswith("redis: external redis://") and lines[2].endswith(": reachable")
    assert lines[3].startswith("postgres: external postgresql://") and lines[3].endswith(
        ": reachable"
    )
    assert not Path(isolated["XDG_DATA_HOME"]).exists(), "status starts and creates nothing"


def test_unreachable_urls_say_so_with_the_reason_and_hide_passwords(
    isolated: dict[str, str],
) -> None:
    lines = status(
        [
            "--redis-url",
            "redis://:s3cret@127.0.0.1:1/0",
            "--database-url",
            "postgresql://u:pw@127.0.0.1:1/db",
        ],
        isolated,
    )

    assert lines[2].startswith("redis: external redis://:***@127.0.0.1:1/0: unreachable (")
    assert lines[3].startswith(
        "postgres: external postgresql://u:***@127.0.0.1:1/db: unreachable ("
    )
    assert "s3cret" not in "\n".join(lines) and ":pw@" not in "\n".join(lines)


def test_embedded_servers_report_the_project_data_directory(
    isolated: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "horae.toml").write_text('namespace = "proj"\n')
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    env = {**isolated, "HORAE_REDIS_URL": "", "HORAE_DATABASE_URL": ""}

    lines = status([], env)

    assert lines == [
        f"config: {tmp_path / 'horae.toml'}",
        f"data directory: {tmp_path / '.horae'}",
        f"redis: embedded, stopped (starts on first use under {tmp_path / '.horae' / 'redis'})",
        f"postgres: embedded, stopped (starts on first "
        f"use under {tmp_path / '.horae' / 'postgres'})",
    ]


def test_a_server_that_answers_but_refuses_is_told_apart(
    isolated: dict[str, str], server_dsn: str
) -> None:
    from tests.conftest import with_database

    lines = status(
        [
            "--redis-url",
            "redis://127.0.0.1:1/0",
            "--database-url",
            with_database(server_dsn, "horae_no_such_db"),
        ],
        isolated,
    )

    assert lines[3].endswith(
        'answers, but refuses (InvalidCatalogNameError: database "horae_no_such_db" does not exist)'
    )
