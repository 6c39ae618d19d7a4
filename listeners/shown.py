"""How an error message shows a caller's value: repr() with its size bounded, because the
value may be anything (a list nested thousands deep makes repr() raise RecursionError, a
50 MB string would make a 50 MB message). listeners/ checks declarations with it;
scheduler/ re-exports it (scheduler.core.errors.shown) for every input check."""

from __future__ import annotations

import reprlib

_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = _SHOWN.maxlong = 300
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxset = _SHOWN.maxfrozenset = _SHOWN.maxdict = 20
_SHOWN.maxlevel = 6


def shown(value: object) -> str:
    """The caller's `value` as an error message shows it: its repr(), shortened when long or
    deep."""
    try:
        return _SHOWN.repr(value)
    except Exception:  # noqa: BLE001 - a value whose own __repr__ fails is still refused by name
        return f"<{type(value).__name__} object>"
