"""The one Settings model: the engine's top-level keys and sections (scheduler/core/config.py)
composed with the audit's (audit/settings.py), the analytics' (audit/analytics/settings.py) and
the console's (console/settings.py); loaded from config/horae.toml's defaults, the user's
horae.toml and HORAE_* variables. The composition root's: the engine reads this object through
scheduler.core.config.Settings (its own sections only), each package through its section."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from audit.analytics.settings import AnalyticsSettings
from audit.settings import AuditSettings
from console.settings import ConsoleSettings
from scheduler.core.config import (
    ClusterSettings,
    ConnectionSettings,
    CronSettings,
    LimitsSettings,
    RetentionSettings,
    RetrySettings,
    TelemetrySettings,
    WorkerSettings,
    load_model,
    model_sources,
)
from scheduler.store.cluster_url import with_url_layout

__all__ = ["Settings", "load_settings", "setting_sources"]


class Settings(ConnectionSettings):
    """Everything configurable, with the defaults of config/horae.toml (in the file's order,
    which `horae config show` follows)."""

    retry: RetrySettings = RetrySettings()
    retention: RetentionSettings = RetentionSettings()
    worker: WorkerSettings = WorkerSettings()
    cron: CronSettings = CronSettings()
    limits: LimitsSettings = LimitsSettings()
    telemetry: TelemetrySettings = TelemetrySettings()
    analytics: AnalyticsSettings = AnalyticsSettings()
    audit: AuditSettings = AuditSettings()
    console: ConsoleSettings = ConsoleSettings()
    cluster: ClusterSettings = ClusterSettings()


def load_settings(
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Settings from a TOML file, the environment and explicit overrides (see
    scheduler.core.config.load_model), with the Redis URL's `partitions=` applied.

    Raises:
        ConfigError: naming the file or variable, the value and what is allowed.
    """
    return with_url_layout(load_model(Settings, path, env, **overrides))


def setting_sources(
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    given: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Where each setting not taken from the defaults comes from, by dotted name
    (scheduler.core.config.model_sources of Settings)."""
    return model_sources(Settings, path, env, given)
