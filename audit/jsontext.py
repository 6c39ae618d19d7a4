"""JSON as the audit stores it: the engine's own text, handed to PostgreSQL as it was
written (jsonb parses numbers as exact decimals), never parsed into Python floats and
serialized again. orjson would read 2**64+1 as a double and write it back rounded
(18446744073709552000); the stdlib reads it exactly but is slow. So a payload, a job's
metadata and an error record travel as `JsonText`, embedded verbatim (orjson.Fragment)
into the batch documents the writer sends.

What jsonb cannot hold is replaced, at the text level, by U+FFFD: a `\\u0000` escape and a
surrogate escape that is not half of a pair (the scheduling API refuses both up front,
validation.to_json, so only other writers produce them; a dead letter's metadata carries an
exception's message as Lua's cjson escaped it). Numbers are never touched: jsonb keeps them
as exact decimals, so what PostgreSQL holds equals the Redis text value for value (an
exponent form is written out, `1e+300` as 1 and 300 zeros, and `-0.0` reads `0.0`).
"""

from __future__ import annotations

import json
import re

import orjson

__all__ = ["JsonText", "clean_text", "dump_json", "json_text", "parse_json", "storable_json"]

# Every escape of a JSON text, left to right: `\\` is consumed whole, so a `\u` after an
# escaped backslash is plain text (matched only inside strings: JSON has no backslash outside).
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)


_SURROGATE = re.compile("[\ud800-\udfff]")
# An integer of 19 digits or more may be beyond what orjson reads exactly (64 bits).
_LONG_DIGITS = re.compile(r"[0-9]{19}")


class JsonText:
    """A JSON document as written by the engine (valid, storable by jsonb). Not a
    dataclass: orjson would serialize one as an object instead of asking _fragment."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonText) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"JsonText({self.text!r})"

    def value(self) -> object:
        """The document parsed exactly: orjson, or the stdlib when a long digit run may be
        an integer beyond 64 bits (orjson would read it as a double)."""
        if _LONG_DIGITS.search(self.text):
            return json.loads(self.text)
        return orjson.loads(self.text)

    def is_object(self) -> bool:
        """Whether the document is a JSON object."""
        return self.text.lstrip().startswith("{")


def clean_text(value: str) -> str:
    """Text Postgres can store: NUL and lone surrogates (a str holds no other) become U+FFFD."""
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = _SURROGATE.sub("\ufffd", value)
    return value


def _high(m: re.Match[str] | None) -> bool:
    return m is not None and m.group(1) is not None and 0xD800 <= int(m.group(1), 16) <= 0xDBFF


def _low(m: re.Match[str] | None) -> bool:
    return m is not None and m.group(1) is not None and 0xDC00 <= int(m.group(1), 16) <= 0xDFFF


def storable_json(text: str) -> str:
    """JSON `text` with each escape jsonb refuses (`\\u0000`, an unpaired surrogate)
    replaced by `\\ufffd`; everything else as it was (the same object when nothing is)."""
    if "\\u" not in text:
        return text
    matches = list(_ESCAPE.finditer(text))
    out: list[str] = []
    pos = 0
    for i, m in enumerate(matches):
        if m.group(1) is None:
            continue
        code = int(m.group(1), 16)
        nxt = matches[i + 1] if i + 1 < len(matches) else None
        prev = matches[i - 1] if i else None
        if code == 0:
            bad = True
        elif 0xD800 <= code <= 0xDBFF:
            bad = not (_low(nxt) and nxt is not None and nxt.start() == m.end())
        elif 0xDC00 <= code <= 0xDFFF:
            bad = not (_high(prev) and prev is not None and prev.end() == m.start())
        else:
            bad = False
        if bad:
            out += (text[pos : m.start()], "\\ufffd")
            pos = m.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def json_text(raw: str) -> JsonText:
    """A JSON field of an event as stored: its own text when it is JSON (storable), else
    the text as a JSON string. orjson only checks it (its numbers are thrown away)."""
    text = storable_json(raw)
    try:
        orjson.loads(text)  # (refuses a raw NUL or lone surrogate: the text is cleaned below)
        return JsonText(text)
    except ValueError:  # orjson also refuses numbers beyond a double (10**400): the stdlib judges
        pass
    text = storable_json(clean_text(raw))
    try:
        json.loads(text, parse_constant=_not_json)
    except (
        ValueError,
        RecursionError,
    ):  # not JSON (NaN, a truncated text, ...): kept as the text it is
        return JsonText(orjson.dumps(clean_text(raw)).decode())
    return JsonText(text)


def _not_json(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str) -> object:
    """A JSON field of an event as a value (integers exact); text that is not JSON is
    kept as a JSON string. For the fields read for their content (error records,
    progress, log lines): a payload or metadata is kept as text (json_text)."""
    return json_text(text).value()


def _fragment(value: object) -> object:
    if isinstance(value, JsonText):
        return orjson.Fragment(value.text)
    return str(value)


def _clean_json(value: object) -> object:
    if isinstance(value, JsonText):
        return value.value()
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_clean_json(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(str(k)): _clean_json(v) for k, v in value.items()}
    return value


def dump_json(value: object) -> str:
    """Serialize for a json/jsonb parameter: JsonText values embedded as written, then
    any escape jsonb refuses replaced (orjson; the stdlib, cleaned, for values orjson
    refuses: lone surrogates, non-str keys, integers beyond 64 bits)."""
    try:
        return storable_json(orjson.dumps(value, default=_fragment).decode())
    except TypeError:
        pass
    return json.dumps(_clean_json(value), separators=(",", ":"), allow_nan=False, default=str)
