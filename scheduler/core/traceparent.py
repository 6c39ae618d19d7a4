"""The W3C traceparent header, parsed without OpenTelemetry: the one parser,
shared by the worker's tracing and the audit (which stores the trace id); and the trace
context of a job scheduled where no OpenTelemetry SDK runs, derived from its id."""

from __future__ import annotations

from hashlib import blake2b
from typing import Final, NamedTuple

_HEX_OR_DASH: Final = frozenset("0123456789abcdef-")


class Traceparent(NamedTuple):
    """The fields of a valid traceparent."""

    trace_id: int
    span_id: int
    flags: int

    @property
    def trace_id_hex(self) -> str:
        """The trace id as the 32 lowercase hex characters tracing backends show."""
        return f"{self.trace_id:032x}"


def parse_traceparent(value: str) -> Traceparent | None:
    """The fields of a W3C traceparent, or None when it is not valid.

    As the W3C Trace Context spec parses it: lowercase hex fields 2-32-16-2; version ff
    is invalid; version 00 is exactly 55 characters, a later version may carry more after
    a "-"; an all-zero trace id or parent id is invalid. (No regex: this runs per attempt.)
    """
    if len(value) < 55 or value[2] != "-" or value[35] != "-" or value[52] != "-":
        return None
    head = value[:55]
    if head.count("-") != 3 or not _HEX_OR_DASH.issuperset(head):
        return None
    version = head[:2]
    if version == "ff" or (len(value) > 55 and (version == "00" or value[55] != "-")):
        return None
    trace_id = int(head[3:35], 16)
    span_id = int(head[36:52], 16)
    if not trace_id or not span_id:
        return None
    return Traceparent(trace_id, span_id, int(head[53:55], 16))


def job_trace(job_id: str) -> Traceparent:
    """The trace context of a job scheduled without one (no SDK where it was scheduled), so
    that every attempt of the job still shares one trace id: trace and parent span ids
    derived from the job id (nothing stored, nothing drawn by the producer), flags 00
    because nobody sampled it (a worker with an SDK asks its own sampler: by the trace id,
    the same answer for every attempt). An id reused after its job was deleted shares it."""
    digest = blake2b(job_id.encode(), digest_size=24, person=b"horae.trace").digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    return Traceparent(trace_id, int.from_bytes(digest[16:], "big") or 1, 0)
