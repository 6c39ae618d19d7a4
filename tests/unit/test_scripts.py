"""Every Lua script documents its KEYS, ARGV and returns, and its error codes match ScriptCode."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from scheduler.scripts import SCRIPT_NAMES, ScriptCode, script_source

LUA = resources.files("scheduler") / "lua"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_header_documents_keys_argv_and_returns(name: str) -> None:
    text = (LUA / f"{name}.lua").read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("--"))
    assert header.startswith(f"-- {name}:"), "header opens with the script name and purpose"
    used_keys = set(re.findall(r"KEYS\[(\d+)\]", text.replace(header, "")))
    for index in used_keys:
        assert f"KEYS[{index}]" in header, f"KEYS[{index}] used but not documented"
    assert "ARGV[1]" in header and "Returns" in header


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_error_codes_in_headers_match_the_enum(name: str) -> None:
    header = (LUA / f"{name}.lua").read_text()
    for label, code in re.findall(r"([A-Z_]{4,}) \((-\d+)\)", header):
        assert ScriptCode[label] == int(code), f"{name}: {label} ({code})"


def test_every_enum_code_is_documented_somewhere() -> None:
    headers = "".join((LUA / f"{n}.lua").read_text() for n in SCRIPT_NAMES)
    for code in ScriptCode:
        assert f"{code.name} ({code.value})" in headers


def test_no_script_calls_time_or_uses_newer_commands() -> None:
    for name in SCRIPT_NAMES:
        src = script_source(name)
        assert "'TIME'" not in src, f"{name}: now_ms must come in as ARGV"
        # Redis 6.2 (embedded) lacks these 7.0 features.
        for newer in ("ZRANGESTORE", "'LMPOP'", "'ZMPOP'", "#!lua", "redis.setresp(3)"):
            assert newer not in src, f"{name} uses {newer}"
