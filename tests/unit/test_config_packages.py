"""Each package's settings beside the package, composed by the root (horae/settings.py): the
engine's config module knows no section of the packages above it, and the relay's tunables
are `[audit]` settings like any other (file, HORAE_AUDIT__*, `horae config show`)."""

from __future__ import annotations

import ast
from dataclasses import MISSING, fields
from pathlib import Path

import pytest
from click.testing import CliRunner

from audit.analytics.settings import AnalyticsSettings
from audit.options import RelayOptions
from audit.settings import AuditSettings
from console.settings import ConsoleSettings
from horae.settings import Settings, load_settings
from scheduler import ConfigError
from scheduler.core import config

ROOT = Path(__file__).resolve().parents[2]
# A module and the top-level packages it must not import (at any level, lazily neither).
BELOW = {
    "scheduler/core/config.py": ("audit", "console", "horae"),
    "scheduler/store/clients.py": ("audit", "console", "horae"),
    "scheduler/store/cluster_url.py": ("audit", "console", "horae"),
    "audit/settings.py": ("console", "horae"),
    "audit/options.py": ("console", "horae"),
    "audit/analytics/settings.py": ("console", "horae"),
    "console/settings.py": ("horae",),
}
RELAY_ONLY = {"consumer", "partitions"}  # who consumes and how many streams: not tunables


def imported(path: Path) -> set[str]:
    """The top-level packages a module imports, wherever the import statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("module", sorted(BELOW))
def test_a_lower_floor_imports_no_package_above_it(module: str) -> None:
    assert not imported(ROOT / module) & set(BELOW[module])


def test_the_root_composes_each_section_from_its_package() -> None:
    kinds = {name: f.annotation for name, f in Settings.model_fields.items()}
    assert kinds["audit"] is AuditSettings and AuditSettings.__module__ == "audit.settings"
    assert kinds["console"] is ConsoleSettings and ConsoleSettings.__module__ == "console.settings"
    assert kinds["analytics"] is AnalyticsSettings
    assert AnalyticsSettings.__module__ == "audit.analytics.settings"
    for section in ("retry", "retention", "worker", "cron", "limits", "telemetry", "cluster"):
        assert kinds[section].__module__ == "scheduler.core.config", section


def test_the_engine_view_names_only_fields_of_the_root_model() -> None:
    members = {
        n for n, v in vars(config.Settings).items() if isinstance(v, property) and n[0] != "_"
    }
    assert "audit" in members and "console" not in members and "analytics" not in members
    assert members <= set(Settings.model_fields)


def test_every_relay_tunable_is_an_audit_setting_without_a_second_default() -> None:
    tunables = {f.name for f in fields(RelayOptions)} - RELAY_ONLY
    assert tunables <= set(AuditSettings.model_fields)
    assert all(f.default is MISSING for f in fields(RelayOptions) if f.name in tunables)
    options = RelayOptions.from_settings(AuditSettings())
    for name in tunables:
        assert getattr(options, name) == AuditSettings.model_fields[name].default, name


def test_relay_tunables_come_from_the_file_and_the_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "horae.toml"
    cfg.write_text("[audit]\nlag_scan_limit = 5\ntrim_approximate = false\n")
    s = load_settings(cfg, env={"HORAE_AUDIT__TRIM_INTERVAL_S": "9.5"})
    options = RelayOptions.from_settings(s.audit)
    assert (options.lag_scan_limit, options.trim_approximate, options.trim_interval_s) == (
        5,
        False,
        9.5,
    )
    with pytest.raises(ConfigError, match=r"audit\.retry_max_s='0': Input should be greater"):
        load_settings(cfg, env={"HORAE_AUDIT__RETRY_MAX_S": "0"})


def test_config_show_lists_the_relay_tunables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scheduler.cli.main import cli

    monkeypatch.chdir(tmp_path)
    env = {"HORAE_AUDIT__POOL_MAX_SIZE": "4", "XDG_DATA_HOME": str(tmp_path / "xdg")}
    result = CliRunner().invoke(cli, ["config", "show"], env=env)
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.output.splitlines()]
    shown = {w[0]: (w[2], " ".join(w[4:])) for w in lines}
    assert shown["audit.trim_interval_s"] == ("2.0", "default")
    assert shown["audit.pool_max_size"] == ("4", "environment HORAE_AUDIT__POOL_MAX_SIZE")
