"""Each default is written in one place and imported everywhere else: the JSON byte limit, the
retry's first delay, the nightly report's cron, the length limits of keys and of ids. The product
sources are scanned for a second definition; the settings, whose defaults are still written in
scheduler/core/config.py, must equal the declarations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from audit.analytics.nightly import NIGHTLY_TOPIC
from listeners.triggers import MAX_NAME_LEN
from scheduler.core import config, flow, retry, validation
from scheduler.core.job import JobInfo

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scheduler", "audit", "listeners", "console", "horae")
# A definition of each default, and the one file allowed to hold it (the settings models import
# it; config/horae.toml mirrors them for readers, checked by tests/unit/test_config.py).
RULES = {
    "json bytes": (
        re.compile(r"\b(?:512 \* 1024|524_?288)\b"),
        {"scheduler/core/validation.py"},
    ),
    "retry delay": (
        re.compile(r"(?i)delay_ms\s*(?::\s*int\s*)?=\s*(?:Field\()?30_?000\b"),
        {"scheduler/core/retry.py"},
    ),
    "nightly cron": (
        re.compile(r"""(?i)\bnightly_cron\s*(?::[^=\n]+)?=\s*["']|=\s*["']30 2 \* \* \*["']"""),
        {"audit/analytics/settings.py"},
    ),
    "key or id length": (
        re.compile(r"^\s*MAX_\w*(?:KEY|ID|NAME)\w*\s*(?::[^=]+)?=\s*\d", re.M),
        {"scheduler/core/flow.py", "listeners/triggers.py"},
    ),
}


def definitions(text: str) -> list[str]:
    """The rules of RULES that `text` holds a definition of."""
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return [name for name, (pattern, _) in RULES.items() if pattern.search(code)]


def test_each_default_is_defined_in_one_place() -> None:
    found: dict[str, set[str]] = {name: set() for name in RULES}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for name in definitions(path.read_text()):
                found[name].add(str(path.relative_to(ROOT)))
    for name, (_, allowed) in RULES.items():
        assert found[name] <= allowed, (name, sorted(found[name] - allowed))
        assert found[name], name  # the rule still finds its declaration


@pytest.mark.parametrize(
    ("planted", "rule"),
    [
        ("MAX_JSON = 512 * 1024\n", "json bytes"),
        ("    backoff_delay_ms: int = 30_000\n", "retry delay"),
        ('NIGHTLY_CRON: Final = "30 2 * * *"\n', "nightly cron"),
        ("MAX_KEY_LEN = 512\n", "key or id length"),
        ("MAX_NAME_LEN = 200  # ids\n", "key or id length"),
    ],
)
def test_a_planted_second_definition_is_found(planted: str, rule: str) -> None:
    assert rule in definitions(planted)


def test_the_others_import_the_declaration() -> None:
    assert validation.MAX_KEY_LEN == flow.MAX_KEY_LEN
    assert validation.MAX_ID_LEN == MAX_NAME_LEN
    assert retry.Backoff().delay_ms == retry.DEFAULT_DELAY_MS
    assert JobInfo.__dataclass_fields__["backoff_delay_ms"].default == retry.DEFAULT_DELAY_MS
    assert NIGHTLY_TOPIC == "horae.audit.nightly"


def test_settings_match_the_declarations() -> None:
    """The settings models take their defaults from these declarations."""
    assert config.RetrySettings().delay_ms == retry.DEFAULT_DELAY_MS
    assert config.RetrySettings().max_delay_ms == retry.DEFAULT_MAX_DELAY_MS
    assert config.LimitsSettings().json_bytes == validation.MAX_JSON_BYTES
