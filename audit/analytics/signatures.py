"""Error signatures: an error's type plus its message with the parts that vary
(the job's own id, UUIDs, ids, numbers, quoted values) normalized away, so one
bug is one row.

The rules are regular expressions in the subset that Python's `re` and Java's
`java.util.regex` read the same way; Spark applies them with regexp_replace (no
Python UDF) and `normalize_message` is the same rules in Python. A unit test
checks the two agree.
"""

from __future__ import annotations

import re
from typing import Final

MAX_SIGNATURE_CHARS: Final = 200
UNKNOWN_TYPE: Final = "Error"
# The failing job's own id is replaced wherever it appears in its message (before
# the rules below: a random id need not look like one, e.g. a base62 id without a
# digit); shorter ids ("1", "ab") are left to the rules, as they could be any token.
MIN_OWN_ID_CHARS: Final = 8
OWN_ID: Final = "<id>"

_HEX = "[0-9a-fA-F]"
_NOT_ALNUM_BEFORE = "(?<![0-9A-Za-z])"
_NOT_ALNUM_AFTER = "(?![0-9A-Za-z])"

# (pattern, replacement), applied in order. Quoted values go before ids and
# numbers so a quoted id becomes one placeholder; numbers go last so they do
# not split the tokens the earlier rules recognise.
RULES: Final[tuple[tuple[str, str], ...]] = (
    # UUIDs, any case, with hyphens.
    (f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}", "<uuid>"),
    # "double", `back` and 'single' quoted values; an apostrophe inside a word (can't) opens
    # nothing.
    ('"[^"]*"', "<str>"),
    ("`[^`]*`", "<str>"),
    (f"{_NOT_ALNUM_BEFORE}'[^']*'", "<str>"),
    # 0x-prefixed hex numbers.
    (f"{_NOT_ALNUM_BEFORE}0[xX]{_HEX}+{_NOT_ALNUM_AFTER}", "<hex>"),
    # Hex ids (uuid4().hex, sha1, object ids): 8+ hex digits with at least one digit and one letter.
    (
        f"{_NOT_ALNUM_BEFORE}(?={_HEX}*[0-9])(?={_HEX}*[a-fA-F]){_HEX}{{8,}}{_NOT_ALNUM_AFTER}",
        "<id>",
    ),
    # Other opaque tokens: 16+ letters and digits mixed (base62 ids, tokens).
    (
        f"{_NOT_ALNUM_BEFORE}(?=[0-9A-Za-z]*[0-9])(?=[0-9A-Za-z]*[A-Za-z])[0-9A-Za-z]{{16,}}{_NOT_ALNUM_AFTER}",
        "<id>",
    ),
    # Numbers, including decimals, IP addresses, times and 1,000 groupings.
    ("[0-9]+(?:[.,:][0-9]+)*", "<n>"),
    # Runs of whitespace (including newlines) become one space.
    ("[ \\t\\r\\n\\f\\x0B]+", " "),
)

_COMPILED: Final = tuple((re.compile(p), r) for p, r in RULES)


def normalize_message(message: str | None, job_id: str | None = None) -> str:
    """The message with variable parts replaced by placeholders, trimmed and capped.

    >>> normalize_message("job 3f2a9c1e0b7d4e21 failed after 3 attempts: 'card declined'")
    'job <id> failed after <n> attempts: <str>'
    >>> normalize_message("gateway refused job NqdNuwpWGpLBVVeZ", job_id="NqdNuwpWGpLBVVeZ")
    'gateway refused job <id>'
    """
    text = message or ""
    if job_id and len(job_id) >= MIN_OWN_ID_CHARS:
        text = text.replace(job_id, OWN_ID)
    for pattern, replacement in _COMPILED:
        text = pattern.sub(replacement, text)
    return text.strip(" ")[:MAX_SIGNATURE_CHARS]


def signature(error_type: str | None, message: str | None, job_id: str | None = None) -> str:
    """`Type: normalized message`, or just the type when the message normalizes to nothing."""
    kind = error_type or UNKNOWN_TYPE
    text = normalize_message(message, job_id)
    return f"{kind}: {text}" if text else kind
