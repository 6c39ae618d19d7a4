"""The plugin's tests: load it when this checkout is not installed with its entry point
yet, and point its `horae` fixture at the run's servers (tests/conftest.py removed the
HORAE_* URLs from the environment so nothing else can reach them)."""

from __future__ import annotations

import importlib

import pytest

from scheduler.config import Settings, load_settings

PLUGIN = "scheduler.pytest_plugin"


def plugin_loaded(config: pytest.Config) -> bool:
    """Whether the plugin is registered (by its entry point, or by this conftest)."""
    return config.pluginmanager.is_registered(importlib.import_module(PLUGIN))


def pytest_configure(config: pytest.Config) -> None:
    if not plugin_loaded(config):
        config.pluginmanager.register(importlib.import_module(PLUGIN), "horae")


@pytest.fixture
def horae_settings(redis_url: str, server_dsn: str) -> Settings:
    """The plugin's own settings, on this run's servers (no config file, no environment)."""
    from scheduler.pytest_plugin import for_tests

    return for_tests(load_settings(path=None, env={}, redis_url=redis_url, database_url=server_dsn))
