"""Settings: config/horae.toml lists every default; env vars override; errors name the value."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from horae.settings import Settings, load_settings
from scheduler import ConfigError
from scheduler.core.config import _flatten_toml

ROOT = Path(__file__).resolve().parents[2]


def test_config_file_equals_the_code_defaults() -> None:
    raw = tomllib.loads((ROOT / "config" / "horae.toml").read_text())
    from_file = Settings.model_validate({**_flatten_toml(raw)})
    defaults = Settings()
    # Empty URLs in the file mean "embedded"; the model says None.
    assert from_file.model_dump(exclude={"redis_url", "database_url"}) == defaults.model_dump(
        exclude={"redis_url", "database_url"}
    )
    for section in ("retry", "retention", "worker", "cron", "telemetry", "analytics", "audit"):
        assert set(raw[section]) == set(getattr(defaults, section).model_dump()), section


def test_env_overrides_file_and_arguments_override_env(tmp_path: Path) -> None:
    cfg = tmp_path / "h.toml"
    cfg.write_text(
        'namespace = "fromfile"\n[worker]\nconcurrency = 3\n[redis]\nurl = "redis://file:1/0"\n'
    )
    s = load_settings(
        cfg, env={"HORAE_WORKER__CONCURRENCY": "7", "HORAE_REDIS_URL": "redis://env:2/0"}
    )
    assert (s.namespace, s.worker.concurrency, s.redis_url) == ("fromfile", 7, "redis://env:2/0")
    s = load_settings(cfg, env={"HORAE_REDIS_URL": "redis://env:2/0"}, redis_url="redis://arg:3/0")
    assert s.redis_url == "redis://arg:3/0"


def test_bad_values_name_the_field_and_value() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env={"HORAE_RETRY__ATTEMPTS": "50"})
    assert "retry.attempts='50'" in str(info.value)
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings("/nonexistent/horae.toml", env={})
    with pytest.raises(ConfigError, match="unknown_key"):
        load_settings(env={"HORAE_WORKER__UNKNOWN_KEY": "1"})


def test_retry_cap_and_jitter_defaults_and_bounds() -> None:
    s = load_settings(env={})
    assert (s.retry.max_delay_ms, s.retry.jitter) == (3_600_000, "none")
    s = load_settings(env={"HORAE_RETRY__MAX_DELAY_MS": "86400000", "HORAE_RETRY__JITTER": "equal"})
    assert (s.retry.max_delay_ms, s.retry.jitter) == (86_400_000, "equal")
    with pytest.raises(ConfigError, match="retry.max_delay_ms='86400001'"):
        load_settings(env={"HORAE_RETRY__MAX_DELAY_MS": "86400001"})
    with pytest.raises(ConfigError, match="retry.jitter='half'"):
        load_settings(env={"HORAE_RETRY__JITTER": "half"})
    with pytest.raises(ConfigError, match=r"max_delay_ms \(10000\) must be >= delay_ms \(30000\)"):
        load_settings(env={"HORAE_RETRY__MAX_DELAY_MS": "10000"})
