"""The plugin's tests: load it when this checkout is not installed with its entry point
yet. Its `horae` fixture runs on this run's servers through `horae_settings`
(tests/conftest.py)."""

from __future__ import annotations

import importlib

import pytest

PLUGIN = "scheduler.testing.plugin"


def plugin_loaded(config: pytest.Config) -> bool:
    """Whether the plugin is registered (by its entry point, or by this conftest)."""
    return config.pluginmanager.is_registered(importlib.import_module(PLUGIN))


def pytest_configure(config: pytest.Config) -> None:
    if not plugin_loaded(config):
        config.pluginmanager.register(importlib.import_module(PLUGIN), "horae")
