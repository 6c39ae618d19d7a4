"""A job's result: what its listeners returned, kept as JSON with the job when it completes
(complete.lua) and on its successful attempt's audit row. Pure: no I/O."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from scheduler.core.errors import InvalidPayload, ResultNotSerializable, ResultTooLarge
from scheduler.core.validation import to_json

# The largest result kept, as JSON ([limits] result_bytes): larger is an attempt failure.
MAX_RESULT_BYTES = 65_536


def result_json(
    returned: Sequence[tuple[str, Any]], several: bool, max_bytes: int = MAX_RESULT_BYTES
) -> str:
    """The result to keep, as JSON text ("" when no listener returned anything): the value of the
    topic's one listener, or, for a topic with `several` listeners, an object listener name ->
    value of each that returned one.

    Args:
        returned: (listener name, value) of each listener that returned something other than None
            (listeners.DispatchResult.results).
        several: the topic has more than one listener.
        max_bytes: the largest result kept, as JSON ([limits] result_bytes).

    Raises:
        ResultNotSerializable: a value is not JSON (or holds what PostgreSQL cannot store: NUL,
            an unpaired surrogate), naming its listener.
        ResultTooLarge: the result is over max_bytes, naming the listener whose value is the
            largest.
    """
    if not returned:
        return ""
    texts: list[tuple[str, str]] = []
    for name, value in returned:
        try:
            # ASCII JSON (validation.to_json): its length is its size in bytes
            text = to_json(value, f"the result of listener {name}", sys.maxsize)
        except InvalidPayload as exc:
            raise ResultNotSerializable(name, str(exc)) from None
        texts.append((name, text))
    if several:
        kept = "{" + ",".join(f"{json.dumps(name)}:{text}" for name, text in texts) + "}"
    else:
        kept = texts[0][1]
    if len(kept) > max_bytes:
        name, text = max(texts, key=lambda item: len(item[1]))
        raise ResultTooLarge(
            name,
            f"the result of listener {name} is {len(text):,} bytes as JSON"
            + (f" ({len(kept):,} with the other listeners')" if several else "")
            + f"; at most {max_bytes:,} are kept ([limits] result_bytes)",
        )
    return kept
