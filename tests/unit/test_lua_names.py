"""Every key name and event name a Lua script uses is declared in Python (scheduler/core/keys.py,
scheduler/core/outbox.py) and compiled into the script (scripts.lua_names): the scripts are parsed
and a string literal used as a key's part or as an event's type fails, as does a compiled name
Python does not declare. Each check is also run on a planted literal, so it can fail."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources

import pytest

from scheduler.core.keys import key_names
from scheduler.core.outbox import EVENT_TYPES, FAILED_OUTCOMES, JOB_OUTCOMES, SUCCESS_OUTCOMES
from scheduler.store.scripts import SCRIPT_NAMES, lua_names, script_source

LUA = resources.files("scheduler.store") / "lua"
SOURCES = sorted(p.name for p in LUA.iterdir() if p.name.endswith(".lua"))
# The prefixes of the compiled names (scripts.lua_names).
COMPILED = re.compile(r"^(?:K_\w+|EV_\w+|OUTCOME_\w+|\w+_MARK)$")
# Variables that hold a key or a key's prefix: a concatenation starting with one builds a key.
KEY_ROOTS = re.compile(r"^(?:ns|due|KEYS|ns_of|\w*prefix|K_\w+)$")
# What a key's name may join its parts with, written in a script (flow_key's ':').
SEPARATORS = {":"}
KEYWORDS = {
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in",
    "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
}  # fmt: skip


@dataclass(frozen=True)
class Tok:
    kind: str  # name, str, num, op
    text: str  # a string's value (unquoted), else the token as written
    line: int


_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<comment>--\[(?P<eq>=*)\[.*?\](?P=eq)\]|--[^\n]*)
    |(?P<long>\[(?P<eq2>=*)\[.*?\](?P=eq2)\])
    |(?P<str>'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")
    |(?P<name>[A-Za-z_]\w*)
    |(?P<num>0[xX][0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)
    |(?P<op>\.\.\.|\.\.|==|~=|<=|>=|[-+*/%^\#<>=(){}\[\];:,.])""",
    re.S | re.X,
)


def tokens(source: str) -> list[Tok]:
    """The tokens of a Lua source, comments left out."""
    out: list[Tok] = []
    pos, line = 0, 1
    while pos < len(source):
        m = _TOKEN.match(source, pos)
        assert m, f"line {line}: cannot tokenize {source[pos : pos + 20]!r}"
        kind = m.lastgroup if m.lastgroup not in ("eq", "eq2") else None
        text = m.group(0)
        for group in ("str", "long", "name", "num", "op"):
            if m.group(group) is not None:
                kind = group
        if kind == "str":
            out.append(Tok("str", text[1:-1], line))
        elif kind == "long":
            out.append(Tok("str", re.sub(r"^\[=*\[|\]=*\]$", "", text), line))
        elif kind in ("name", "num", "op"):
            out.append(Tok(kind, text, line))
        line += text.count("\n")
        pos = m.end()
    return out


_CLOSE = {"(": ")", "[": "]", "{": "}"}
_OPEN = {v: k for k, v in _CLOSE.items()}


def _match_forward(toks: list[Tok], i: int) -> int:
    """The index of the bracket closing the one at i."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].kind == "op" and toks[j].text in _CLOSE:
            depth += 1
        elif toks[j].kind == "op" and toks[j].text in _OPEN:
            depth -= 1
            if depth == 0:
                return j
    raise AssertionError(f"line {toks[i].line}: unbalanced {toks[i].text}")


def _match_back(toks: list[Tok], i: int) -> int:
    """The index of the bracket opening the one at i."""
    depth = 0
    for j in range(i, -1, -1):
        if toks[j].kind == "op" and toks[j].text in _OPEN:
            depth += 1
        elif toks[j].kind == "op" and toks[j].text in _CLOSE:
            depth -= 1
            if depth == 0:
                return j
    raise AssertionError(f"line {toks[i].line}: unbalanced {toks[i].text}")


def _is(tok: Tok, *texts: str) -> bool:
    return tok.kind == "op" and tok.text in texts


def _operand_end(toks: list[Tok], i: int) -> int:
    """One past the last token of the operand starting at i (a name with its fields, indexes
    and calls, a parenthesized expression, a literal; unary # or - first)."""
    while i < len(toks) and (_is(toks[i], "#", "-") or toks[i].text == "not"):
        i += 1
    if _is(toks[i], "("):
        i = _match_forward(toks, i) + 1
    elif toks[i].kind in ("str", "num") or (toks[i].kind == "name" and toks[i].text in KEYWORDS):
        return i + 1
    else:
        i += 1
    while i < len(toks):
        if _is(toks[i], ".", ":") and i + 1 < len(toks) and toks[i + 1].kind == "name":
            i += 2
        elif _is(toks[i], "(", "["):
            i = _match_forward(toks, i) + 1
        else:
            break
    return i


def _operand_start(toks: list[Tok], i: int) -> int:
    """The first token of the operand whose last token is at i."""
    while True:
        t = toks[i]
        if _is(t, ")", "]"):
            i = _match_back(toks, i)
            before = toks[i - 1] if i > 0 else None
            if before is not None and (
                (before.kind == "name" and before.text not in KEYWORDS) or _is(before, ")", "]")
            ):
                i -= 1
                continue
        elif t.kind == "name" and i >= 2 and _is(toks[i - 1], ".", ":"):
            i -= 2
            continue
        while i > 0 and _is(toks[i - 1], "#"):
            i -= 1
        return i


def concatenations(toks: list[Tok]) -> list[list[list[Tok]]]:
    """Every chain `a .. b .. c` of the source, as its operands (each a token list)."""
    chains: list[list[list[Tok]]] = []
    i = 0
    while i < len(toks):
        if not _is(toks[i], ".."):
            i += 1
            continue
        start = _operand_start(toks, i - 1)
        operands = [toks[start:i]]
        while i < len(toks) and _is(toks[i], ".."):
            end = _operand_end(toks, i + 1)
            operands.append(toks[i + 1 : end])
            i = end
        chains.append(operands)
    return chains


def _call_args(toks: list[Tok], open_at: int) -> list[list[Tok]]:
    """The arguments of the call whose '(' is at open_at."""
    close, args, cur, i = _match_forward(toks, open_at), [], [], open_at + 1
    while i < close:
        if _is(toks[i], "(", "[", "{"):
            end = _match_forward(toks, i)
            cur += toks[i : end + 1]
            i = end + 1
        elif _is(toks[i], ","):
            args.append(cur)
            cur, i = [], i + 1
        else:
            cur.append(toks[i])
            i += 1
    return args + [cur] if cur else args


def _looks_like_key_part(text: str) -> bool:
    """A literal shaped like part of a key's name ('pk:', ':levels', '}:j:'), not JSON or a
    pattern."""
    if '"' in text or "%" in text or len(text) < 2:
        return False
    return "}:" in text or text.endswith(":") or text.startswith(":")


def violations(source: str, name: str = "<lua>") -> list[str]:
    """What in `source` names a key or an event other than through the compiled names."""
    toks = tokens(source)
    found: list[str] = []
    declared = lua_names()
    for t in toks:
        if t.kind == "name" and COMPILED.match(t.text) and t.text not in declared:
            found.append(f"{name}:{t.line}: {t.text} is declared nowhere in Python")
        if t.kind == "str" and _looks_like_key_part(t.text):
            found.append(f"{name}:{t.line}: key part {t.text!r} written as a literal")
    for i, t in enumerate(toks[:-1]):
        if t.text == "local" and COMPILED.match(toks[i + 1].text):
            found.append(f"{name}:{t.line}: {toks[i + 1].text} defined in the script")
    # keys: a concatenation that builds a key joins only compiled names, values and ':'
    for chain in concatenations(toks):
        root = chain[0][0] if chain[0] else None
        names = {tok.text for operand in chain for tok in operand if tok.kind == "name"}
        if not (
            (root is not None and root.kind == "name" and KEY_ROOTS.match(root.text))
            or any(n.startswith("K_") for n in names)
        ):
            continue
        for operand in chain:
            if len(operand) == 1 and operand[0].kind == "str":
                if operand[0].text not in SEPARATORS:
                    found.append(
                        f"{name}:{operand[0].line}: key part {operand[0].text!r} written as a "
                        "literal (declare it in scheduler/core/keys.py KeyName)"
                    )
    # the kind of a flow key
    for i, t in enumerate(toks[:-1]):
        if t.text == "flow_key" and _is(toks[i + 1], "(") and not _is(toks[i - 1], "function"):
            args = _call_args(toks, i + 1)
            if len(args) > 1 and len(args[1]) == 1 and args[1][0].kind == "str":
                found.append(f"{name}:{t.line}: flow key kind {args[1][0].text!r} as a literal")
    # events: the value of an event's `e` field is an EV_ name, or a variable only ever set to one
    for i, t in enumerate(toks[:-2]):
        if not (t.kind == "str" and t.text == "e" and _is(toks[i + 1], ",")):
            continue
        value = toks[i + 2]
        if value.kind == "str":
            found.append(
                f"{name}:{value.line}: event type {value.text!r} written as a literal "
                "(declare it in scheduler/core/outbox.py, use EV_...)"
            )
        elif value.kind == "name" and not value.text.startswith("EV_"):
            for j, u in enumerate(toks[:-2]):
                if (
                    u.kind == "name"
                    and u.text == value.text
                    and _is(toks[j + 1], "=")
                    and not toks[j + 2].text.startswith("EV_")
                ):
                    found.append(
                        f"{name}:{u.line}: event variable {value.text} set to "
                        f"{toks[j + 2].text!r}, not an EV_ name"
                    )
        elif value.kind != "name":
            found.append(f"{name}:{value.line}: event type {value.text!r} is not an EV_ name")
    return found


def test_every_script_names_keys_and_events_through_compiled_names() -> None:
    found = [v for src in SOURCES for v in violations((LUA / src).read_text(), src)]
    assert found == []


def test_the_scripts_use_the_compiled_names() -> None:
    """The check has something to check: keys and events are built from the names."""
    text = "".join((LUA / src).read_text() for src in SOURCES)
    for used in ("K_PARKED", "K_UNPARK", "K_DUE_LEVELS", "K_DUE_PRIORITY", "K_FLOW_FIFO"):
        assert used in text
    events = {n for n in re.findall(r"\bEV_\w+", text)}
    assert len(events) >= 14


@pytest.mark.parametrize(
    ("planted", "why"),
    [
        ("redis.call('ZADD', ns .. 'unpark', 'LT', now, topic)", "key part 'unpark'"),
        ("local pk = ns .. 'pk:' .. topic", "key part 'pk:'"),
        ("redis.call('ZADD', due .. ':levels', p, p)", "key part ':levels'"),
        ("local s = KEYS[2] .. ':p:' .. prio", "key part ':p:'"),
        ("local k = ns_of(job) .. 'fresh' .. id", "key part 'fresh'"),
        ("local k = ns .. K_PARKED .. topic .. ':x'", "key part ':x'"),
        ("local k = prefix .. 'new_thing'", "key part 'new_thing'"),
        ("local ks = flow_key(ns, 'ks', topic, key)", "flow key kind 'ks'"),
        ("return (string.gsub(job_key, '}:j:', PAYLOAD_MARK, 1))", "key part '}:j:'"),
        ("emit(outbox, 'e', 'attempt_started', 'id', id)", "event type 'attempt_started'"),
        ("local ev = { 'e', \"retried\", 'id', id }", "event type 'retried'"),
        (
            "local kind = EV_COMPLETED\nkind = 'attempt_succeeded'\nemit(o, 'e', kind)",
            "event variable kind set to",
        ),
        ("emit(outbox, 'e', EV_ATTEMPT_EXPLODED, 'id', id)", "EV_ATTEMPT_EXPLODED is declared"),
        ("local x = ns .. K_NOT_A_KEY", "K_NOT_A_KEY is declared nowhere"),
        ("local K_UNPARK = 'unpark2'", "K_UNPARK defined in the script"),
    ],
)
def test_a_planted_literal_fails(planted: str, why: str) -> None:
    found = violations(planted)
    assert any(why in v for v in found), found


def test_a_literal_planted_in_a_real_script_fails() -> None:
    claim = (LUA / "claim.lua").read_text()
    assert violations(claim, "claim.lua") == []
    planted = claim.replace("ns .. K_UNPARK", "ns .. 'unpark'", 1)
    assert planted != claim
    assert violations(planted, "claim.lua") != []
    fail = (LUA / "fail.lua").read_text()
    planted = fail.replace("EV_RETRY_SCHEDULED", "'retry_scheduled'", 1)
    assert planted != fail and violations(planted, "fail.lua") != []


def test_legitimate_literals_pass() -> None:
    """Values, fields, JSON and separators are not key names."""
    ok = (
        "local token = worker .. ':' .. attempt_s .. ':' .. int(n)\n"
        "add_count(counts, topic .. '|' .. from, '-1')\n"
        "local p = '{\"percent\":' .. percent\n"
        "return ns .. kind .. ':' .. #topic .. ':' .. topic .. ':' .. (key or '')\n"
        "emit(outbox, 'e', EV_SCHEDULED, 'id', id, 'from', 'failed')\n"
    )
    assert violations(ok) == []


def test_compiled_names_are_python_declarations() -> None:
    """Each compiled name is one Python declaration: the key names, the event types, the
    outcomes, and the marks built from them."""
    names = lua_names()
    assert {n[2:]: v for n, v in names.items() if n.startswith("K_")} == dict(key_names())
    assert {v for n, v in names.items() if n.startswith("EV_")} == set(EVENT_TYPES)
    assert {v for n, v in names.items() if n.startswith("OUTCOME_")} == set(
        SUCCESS_OUTCOMES + FAILED_OUTCOMES + JOB_OUTCOMES
    )
    assert names["JOB_MARK"] == "}:" + key_names()["JOB"]


@pytest.mark.parametrize("script", SCRIPT_NAMES)
def test_each_script_has_the_names_it_uses_written_in_as_literals(script: str) -> None:
    """A compiled name (K_, EV_, OUTCOME_, *_MARK, AUDIT, CLAIM_FIELDS) is written into the
    code as its literal, never left as a name (it would be an undefined global in Redis) nor
    declared as a local of the top level (each helper capturing it paid on every call)."""
    names = lua_names()
    source = script_source(script)
    code = re.sub(r"--[^\n]*", "", source)
    left = set(re.findall(r"\b(?:(?:K|EV|OUTCOME)_\w+|\w+_MARK|AUDIT|CLAIM_FIELDS)\b", code))
    assert left == set(), (script, left)
    body = re.sub(r"--[^\n]*", "", (LUA / f"{script}.lua").read_text())
    for used in set(re.findall(r"\b(?:K|EV|OUTCOME)_\w+|\b\w+_MARK\b", body)):
        assert json.dumps(names[used]) in code, (script, used)


def test_the_audit_flag_is_compiled_in() -> None:
    assert "if true then" in script_source("claim", audit=True)
    assert "if false then" in script_source("claim", audit=False)
    assert script_source("claim", audit=True) != script_source("claim", audit=False)
