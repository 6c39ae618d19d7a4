"""Settings a user can see (issue 29): `horae config show` lists every setting of the model
with its effective value and source, passwords and tokens masked; `--defaults` prints the
annotated settings file shipped in the package (config/horae.toml); `horae --version` and
`horae.__version__` come from the package metadata."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib import metadata, resources
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import BaseModel

import horae
from horae.settings import Settings
from scheduler.cli.main import cli
from tests.logging_guard import root_logging  # noqa: F401  (a fixture)

ROOT = Path(__file__).resolve().parents[2]
HORAE = Path(sys.executable).with_name("horae")


def model_names() -> list[str]:
    """Every setting of the model, sections walked, in declaration order."""
    names = []
    for name, field in Settings.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            names += [f"{name}.{inner}" for inner in field.annotation.model_fields]
        else:
            names.append(name)
    return names


@pytest.fixture
def isolated(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    root_logging: None,  # noqa: F811  (the imported fixture)
) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("HORAE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    return tmp_path


def show(args: list[str], env: dict[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """`horae ARGS config show` as {name: (value, source)}."""
    result = CliRunner().invoke(cli, [*args, "config", "show"], env=env)
    assert result.exit_code == 0, result.output
    lines = {}
    for line in result.output.splitlines():
        setting, _, source = line.partition("  # ")
        name, _, value = setting.partition(" = ")
        assert name not in lines, f"{name} twice"
        lines[name] = (value.strip(), source)
    return lines


def test_every_setting_is_listed_with_its_default_source(isolated: Path) -> None:
    lines = show([])

    assert list(lines) == model_names()
    defaults = Settings()
    for name, (value, source) in lines.items():
        if name == "data_dir":
            assert source == f"default: the per-user directory of the working tree {isolated}"
            continue
        assert source == "default", name
        section, _, key = name.rpartition(".")
        expected = getattr(getattr(defaults, section) if section else defaults, key)
        expected = list(expected) if isinstance(expected, tuple) else expected  # a TOML array
        assert tomllib.loads(f"v = {value}")["v"] == ("" if expected is None else expected), name


def test_each_source_is_named_and_no_secret_is_shown(isolated: Path) -> None:
    config = isolated / "horae.toml"
    config.write_text(
        'namespace = "from-file"\n[database]\nurl = "postgresql://u:dbpass@db:5432/x"\n'
        "[worker]\nconcurrency = 3\n[analytics.spark_conf]\n"
        '"spark.hadoop.fs.s3a.secret.key" = "s3secret"\n"spark.driver.memory" = "4g"\n'
    )
    env = {
        "HORAE_WORKER__CONCURRENCY": "7",
        "HORAE_CONSOLE__OPERATOR_TOKEN": "op-token-1",
        "HORAE_RETRY__ATTEMPTS": "9",
    }

    result = CliRunner().invoke(
        cli, ["--redis-url", "redis://:redispass@r:6379/0", "config", "show"], env=env
    )
    lines = show(["--redis-url", "redis://:redispass@r:6379/0"], env)

    for secret in ("dbpass", "redispass", "op-token-1", "s3secret"):
        assert secret not in result.output, secret
    assert lines["redis_url"] == ('"redis://:***@r:6379/0"', "option --redis-url")
    assert lines["database_url"] == ('"postgresql://u:***@db:5432/x"', f"file {config}")
    assert lines["namespace"] == ('"from-file"', f"file {config}")
    assert lines["worker.concurrency"] == (
        "7",
        "environment HORAE_WORKER__CONCURRENCY",
    )  # env over file
    assert lines["retry.attempts"] == ("9", "environment HORAE_RETRY__ATTEMPTS")
    assert lines["console.operator_token"] == ('"***"', "environment HORAE_CONSOLE__OPERATOR_TOKEN")
    assert lines["console.viewer_token"] == ('""', "default")
    assert lines["analytics.spark_conf"] == (
        '{"spark.hadoop.fs.s3a.secret.key" = "***", "spark.driver.memory" = "4g"}',
        f"file {config}",
    )
    assert lines["data_dir"] == (f'"{isolated / ".horae"}"', f"default: .horae/ next to {config}")
    assert lines["worker.lease_ms"] == ("30000", "default")


def test_defaults_prints_the_annotated_file_shipped_in_the_package(isolated: Path) -> None:
    source = (ROOT / "config" / "horae.toml").read_text()
    shipped = resources.files("scheduler").joinpath("horae-defaults.toml").read_text()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())

    result = CliRunner().invoke(cli, ["config", "show", "--defaults"])

    assert result.exit_code == 0, result.output
    assert result.output == source == shipped
    assert "horae-defaults.toml" in pyproject["tool"]["setuptools"]["package-data"]["scheduler"]


def test_version_comes_from_the_package_metadata() -> None:
    version = metadata.version("horae")

    result = subprocess.run([str(HORAE), "--version"], capture_output=True, text=True, timeout=60)

    assert (result.returncode, result.stdout) == (0, f"horae {version}\n")
    assert horae.__version__ == version


def test_a_users_module_shadowing_a_package_is_refused_with_its_path(tmp_path: Path) -> None:
    """The four generic top-level names (scheduler, listeners, audit, console) must be ours."""
    (tmp_path / "audit.py").write_text("raise SystemExit('the user module was imported')\n")
    (tmp_path / "mine" / "listeners").mkdir(parents=True)
    (tmp_path / "mine" / "listeners" / "__init__.py").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    imported = subprocess.run(
        [sys.executable, "-c", "import horae"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    command = subprocess.run(
        [str(HORAE), "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "PYTHONPATH": str(tmp_path / "mine")},
    )

    assert imported.returncode == 1 and "PackageShadowed" in imported.stderr, imported.stderr
    assert (
        f"`import audit` resolves to {tmp_path / 'audit.py'}, "
        f"not to {ROOT / 'audit' / '__init__.py'}" in imported.stderr
    )
    assert command.returncode == 1 and command.stdout == "", command.stdout
    assert command.stderr.startswith(
        "Error: horae's package 'listeners' is shadowed: `import listeners` "
        f"resolves to {tmp_path / 'mine' / 'listeners' / '__init__.py'}"
    ), command.stderr
    assert len(command.stderr.splitlines()) == 1


def test_a_users_console_module_does_not_stop_the_library_but_stops_the_console_command(
    tmp_path: Path,
) -> None:
    """`console` is imported only by `horae console`: a project's own console.py may sit beside
    its code that imports horae; the CLI, which may serve the console, still refuses it."""
    (tmp_path / "console.py").write_text("raise SystemExit('the user module was imported')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    imported = subprocess.run(
        [sys.executable, "-c", "import horae; print(horae.__version__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    command = subprocess.run(
        [str(HORAE), "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "PYTHONPATH": str(tmp_path)},
    )

    assert imported.returncode == 0 and imported.stdout.strip() == metadata.version("horae"), (
        imported.stderr
    )
    assert command.returncode == 1 and "horae's package 'console' is shadowed" in command.stderr, (
        command.stderr
    )
