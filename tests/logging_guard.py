"""A fixture for tests that run the `horae` group in-process: it installs its own root
handler (on the runner's stream, closed afterwards) and level; put the old ones back."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
