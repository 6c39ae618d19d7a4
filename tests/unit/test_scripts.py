"""Every Lua script's header documents each KEYS and ARGV index its body uses (and no
other), and each return code: labels match the enums in scheduler.store.scripts, and every
literal code the body returns is documented."""

from __future__ import annotations

import re
from enum import IntEnum
from importlib import resources

import pytest

from scheduler.store.scripts import (
    SCRIPT_NAMES,
    CancelCode,
    CopyCode,
    DrainCode,
    DropCode,
    EnqueueCode,
    FlowCode,
    OperationCode,
    PauseCode,
    ReportCode,
    ScriptCode,
    SettleCode,
    TopicCode,
    UpsertCode,
    script_source,
)

LUA = resources.files("scheduler.store") / "lua"

# The enum of each script's non-negative reply codes (negative ones are ScriptCode).
REPLIES: dict[str, type[IntEnum]] = {
    "complete": SettleCode,
    "fail": SettleCode,
    "enqueue": EnqueueCode,
    "cancel": CancelCode,
    "upsert_cron": UpsertCode,
    "set_cron_paused": PauseCode,
    "retry_job": OperationCode,
    "delete_job": OperationCode,
    "reschedule_job": OperationCode,
    "replay_dead_letter": OperationCode,
    "delete_dead_letter": OperationCode,
    "put_topic": TopicCode,
    "set_progress": ReportCode,
    "append_log": ReportCode,
    "copy_entry": CopyCode,
    "drop_entry": DropCode,
    "request_drain": DrainCode,
    "create_flow": FlowCode,
}

LABEL = re.compile(r"\b([A-Z][A-Z_]+) \((-?\d+)\)")
LITERAL_RETURN = re.compile(r"(?:\breturn\s+\{?\s*|res\[#res \+ 1\] = )(-?\d+)\b")


def split(name: str) -> tuple[str, str]:
    """(header, body): the opening comment block, and the code after it without comments."""
    lines = (LUA / f"{name}.lua").read_text().splitlines()
    n = next(i for i, line in enumerate(lines) if not line.startswith("--"))
    body = "\n".join(re.sub(r"--.*$", "", line) for line in lines[n:])
    return "\n".join(lines[:n]), body


def indexes(pattern: str, text: str) -> set[int]:
    return {int(i) for i in re.findall(pattern, text)}


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_header_names_the_script_and_documents_its_returns(name: str) -> None:
    header, _ = split(name)
    assert header.startswith(f"-- {name}:"), "header opens with the script name and purpose"
    assert "-- Returns" in header


@pytest.mark.parametrize("table", ["KEYS", "ARGV"])
@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_index_used_is_documented_and_every_documented_one_used(
    name: str, table: str
) -> None:
    header, body = split(name)
    used = indexes(rf"\b{table}\[(\d+)\]", body)
    documented = indexes(rf"\b{table}\[(\d+)\]", header)
    open_ranges = indexes(rf"\b{table}\[(\d+)\.\.\]", header)  # ARGV[n..]: repeated groups from n
    for index in used - documented:
        assert any(index >= start for start in open_ranges), (
            f"{name}: {table}[{index}] used but not documented"
        )
    for index in documented:
        assert index in used, f"{name}: {table}[{index}] documented but not used"
    for start in open_ranges:
        assert re.search(rf"\bi = {start}\b", body), (
            f"{name}: {table}[{start}..] documented but not read"
        )


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_return_codes_match_the_enums_and_every_literal_return_is_documented(name: str) -> None:
    header, body = split(name)
    documented = {int(code) for _, code in LABEL.findall(header)}
    replies = REPLIES.get(name)
    for label, code in LABEL.findall(header):
        enum: type[IntEnum] | None = ScriptCode if int(code) < 0 else replies
        assert enum is not None, f"{name}: {label} ({code}) has no enum"
        assert enum[label] == int(code), f"{name}: {label} ({code}) is not {enum.__name__}.{label}"
    for code in LITERAL_RETURN.findall(body):
        assert int(code) in documented, f"{name}: returns {code}, not documented in its header"


def test_every_enum_code_is_documented_by_a_script_that_returns_it() -> None:
    headers = "".join(split(n)[0] for n in SCRIPT_NAMES)
    for code in ScriptCode:
        assert f"{code.name} ({code.value})" in headers
    for enum in set(REPLIES.values()):
        headers = "".join(split(n)[0] for n, e in REPLIES.items() if e is enum)
        for member in enum:
            assert f"{member.name} ({member.value})" in headers, f"{member!r} not documented"


def test_no_script_calls_time_or_uses_newer_commands() -> None:
    for name in SCRIPT_NAMES:
        src = script_source(name)
        assert "'TIME'" not in src, f"{name}: now_ms must come in as ARGV"
        # Redis 6.2 (embedded) lacks these 7.0 features.
        for newer in ("ZRANGESTORE", "'LMPOP'", "'ZMPOP'", "#!lua", "redis.setresp(3)"):
            assert newer not in src, f"{name} uses {newer}"
