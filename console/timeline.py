"""A job's attempt timeline: scheduled → each attempt (its start, end and outcome) → the waits
before each retry → its end, from the job's own times (Redis, or the audit once Redis let the
job go) and the audit's attempt rows; with what each attempt's listeners reported (progress and
log lines: the audit's copy once the attempt settled, Redis's live one while it runs).

`build` makes the spans (GET /api/v1/jobs/{job_id} returns them as they are); `svg` draws them
as inline SVG on the server: no script, every text escaped, colours from the stylesheet's
classes (console.css), so both themes apply."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from html import escape
from typing import Literal

from audit.records import AttemptRecord, AuditRecord
from scheduler.core.job import JobInfo, JobState
from scheduler.core.progress import Progress
from scheduler.core.timeutil import rfc3339

Kind = Literal["scheduled", "attempt", "retry_wait", "terminal"]
KINDS: tuple[Kind, ...] = ("scheduled", "attempt", "retry_wait", "terminal")
TERMINAL = ("completed", "failed", "cancelled")
WAITING = "waiting_for_parents"  # a job scheduled after others (after=, a flow's node)
_MS = timedelta(milliseconds=1)


@dataclass(frozen=True)
class LogEntry:
    """One log line of an attempt; `at` known for the lines Redis still holds (None: the
    audit's copy, which keeps the lines but not their times)."""

    attempt: int
    at: datetime | None
    line: str


@dataclass(frozen=True)
class Attempt:
    """One attempt: the audit's row and what its listeners reported."""

    record: AttemptRecord
    progress: Progress | None = None
    logs: list[LogEntry] = field(default_factory=list)

    @property
    def number(self) -> int:
        return self.record.attempt

    @property
    def started_at(self) -> datetime | None:
        """Its start: the audit's, else its end less its duration (a start the relay missed)."""
        r = self.record
        if r.started_at is not None:
            return r.started_at
        if r.finished_at is not None and r.duration_ms is not None:
            return r.finished_at - r.duration_ms * _MS
        return None

    @property
    def due_at(self) -> datetime | None:
        """When it was due: its start less its lateness (None: lateness unknown)."""
        r = self.record
        if r.started_at is None or r.lateness_ms is None:
            return None
        return r.started_at - max(r.lateness_ms, 0) * _MS


@dataclass(frozen=True)
class Span:
    """One part of the timeline. `end` None: still open (an attempt that runs now); `planned`:
    its end is a plan still ahead (a due time), not a fact; a terminal span is one instant."""

    kind: Kind
    status: str
    start: datetime
    end: datetime | None
    attempt: int | None = None
    planned: bool = False
    due: datetime | None = None  # an attempt's due time (its lateness: start - due)

    def until(self, now: datetime) -> datetime:
        """Where it ends on the chart: its end, or now while open."""
        return self.end if self.end is not None else max(now, self.start)

    def duration_ms(self, now: datetime) -> int:
        return max(0, round((self.until(now) - self.start) / _MS))

    @property
    def label(self) -> str:
        """Its row's name: scheduled, attempt N, retry wait, or the job's end state."""
        if self.kind == "attempt":
            return f"attempt {self.attempt}"
        if self.kind == "retry_wait":
            return "retry wait"
        return self.status if self.kind == "terminal" else "scheduled"

    def summary(self, now: datetime) -> str:
        """What the row says beside its bar: the outcome and how long, in words."""
        took = duration(self.duration_ms(now))
        if self.kind == "scheduled":
            if self.status == WAITING:
                return "waits for the jobs it runs after"
            if self.planned:
                return f"due in {duration(_ms(self.until(now) - now))}"
            return f"due {took} after scheduling" if self.end != self.start else "due at once"
        if self.kind == "attempt":
            text = f"{self.status} · {took}" + (" so far" if self.end is None else "")
            late = _ms(self.start - self.due) if self.due is not None else 0
            return text + (f" · {duration(late)} late" if late > 0 else "")
        if self.kind == "retry_wait":
            return f"next in {duration(_ms(self.until(now) - now))}" if self.planned else took
        return f"at {(rfc3339(self.start) or '')[11:]}"

    def describe(self, now: datetime) -> str:
        """The span in one sentence with its instants (a bar's tooltip, the chart's desc)."""
        start, end = rfc3339(self.start), rfc3339(self.end)
        if self.kind == "scheduled":
            if self.status == WAITING:
                return f"scheduled at {start}, waiting for the jobs it runs after"
            return f"scheduled at {start}, due at {end}{' (ahead)' if self.planned else ''}"
        if self.kind == "attempt":
            text = f"attempt {self.attempt} {self.status}: started {start}, "
            text += f"ended {end}" if self.end is not None else "still running"
            text += f", {duration(self.duration_ms(now))}"
            if self.due is not None and self.start > self.due:
                text += f", started {duration(_ms(self.start - self.due))} after its due time"
            return text
        if self.kind == "retry_wait":
            if self.planned:
                return f"waiting from {start} for the next attempt, due at {end}"
            took = duration(self.duration_ms(now))
            return f"waited {took} before the next attempt ({start} to {end})"
        return f"{self.status} at {start}"


@dataclass(frozen=True)
class Timeline:
    """A job's spans in order, its attempts (with their reports), its state and the time the
    chart was drawn at (`now`: open spans end there)."""

    state: str
    spans: list[Span]
    attempts: list[Attempt]
    now: datetime

    @property
    def live(self) -> bool:
        """Whether what the page shows can still change: the job has not ended (completed,
        failed or cancelled), or one of its attempts has not settled yet (a cancelled job's
        attempt still in flight, or the audit relay a moment behind Redis)."""
        return self.state not in TERMINAL or self.unsettled

    @property
    def unsettled(self) -> bool:
        """Whether an attempt runs (as the audit or Redis sees it)."""
        return any(a.record.outcome is None for a in self.attempts)

    def bounds(self) -> tuple[datetime, datetime] | None:
        """The chart's first and last instants (now included while the job is live)."""
        if not self.spans:
            return None
        first = min(s.start for s in self.spans)
        last = max(max(s.start, s.until(self.now)) for s in self.spans)
        if self.live and any(s.end is None for s in self.spans):
            last = max(last, self.now)
        return first, last


def _ms(delta: timedelta) -> int:
    return max(0, round(delta / _MS))


def duration(ms: int) -> str:
    """A duration for people: "15 ms", "1.50 s", "2 min 5 s", "3 h 12 min", "2 d 3 h"."""
    if ms < 1000:
        return f"{ms} ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.2f} s" if s < 10 else f"{s:.1f} s"
    m, s = divmod(round(s), 60)
    if m < 60:
        return f"{m} min {s} s" if s else f"{m} min"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def attempts_of(job: JobInfo | None, rows: Sequence[AttemptRecord]) -> list[Attempt]:
    """The audit's attempts, each with its reports: a settled attempt's from the audit's row;
    the attempt running now (the last row, not settled) with Redis's live progress and the log
    lines it wrote so far. An attempt Redis runs that the audit has not seen start yet (the
    relay's lag) is added, its start unknown."""
    out: list[Attempt] = []
    running = job is not None and job.state == JobState.RUNNING
    for r in rows:
        if r.outcome is None and job is not None and r is rows[-1]:
            out.append(Attempt(r, job.progress, _live_lines(job, r.attempt, r.started_at)))
        else:
            out.append(Attempt(r, r.progress, _settled_lines(job, r)))
    if running and job is not None and (not rows or rows[-1].outcome is not None):
        number = (rows[-1].attempt if rows else 0) + 1
        record = AttemptRecord(
            job_id=job.id,
            attempt=number,
            worker=None,
            started_at=None,
            finished_at=None,
            outcome=None,
            error_type=None,
            error_message=None,
            duration_ms=None,
            lateness_ms=None,
        )
        out.append(Attempt(record, job.progress, _live_lines(job, number, None)))
    return out


def _settled_lines(job: JobInfo | None, r: AttemptRecord) -> list[LogEntry]:
    """A settled attempt's log lines, the audit's copy; with their times when Redis still holds
    the very same lines, written by an attempt of that number between its start and its end."""
    kept = r.logs or []
    held = [
        line
        for line in (job.logs if job is not None and kept else [])
        if getattr(line, "attempt", None) == r.attempt
        and r.started_at is not None
        and r.finished_at is not None
        and r.started_at <= getattr(line, "at", r.started_at) <= r.finished_at
    ]
    if [str(line) for line in held] == kept:
        return [LogEntry(r.attempt, getattr(line, "at", None), str(line)) for line in held]
    return [LogEntry(r.attempt, None, line) for line in kept]


def _live_lines(job: JobInfo, number: int, started: datetime | None) -> list[LogEntry]:
    """The log lines of the job's current attempt that Redis holds (they carry Redis's attempt
    number, which restarts after an operator's retry: the lines since the attempt started)."""
    current = job.attempts
    return [
        LogEntry(number, at, str(line))
        for line in job.logs
        if getattr(line, "attempt", None) == current
        and ((at := getattr(line, "at", None)) is None or started is None or at >= started)
    ]


def _ended_at(job: JobInfo | None, record: AuditRecord | None) -> datetime | None:
    if job is not None:
        return job.finished_at
    if record is None:
        return None
    return record.completed_at or record.failed_at or record.cancelled_at


def build(
    job: JobInfo | None,
    record: AuditRecord | None,
    rows: Sequence[AttemptRecord],
    now: datetime,
) -> Timeline:
    """The job's timeline from Redis's snapshot (None once pruned), the audit's job row and
    attempt rows, at `now` (the scheduler's clock)."""
    state = job.state.value if job is not None else (str(record.status) if record else "unknown")
    attempts = attempts_of(job, rows)
    created = job.created_at if job is not None else (record.created_at if record else None)
    run_at = job.run_at if job is not None else (record.run_at if record else None)
    ended = _ended_at(job, record) if state in TERMINAL else None
    timed = [a for a in attempts if a.started_at is not None]
    spans: list[Span] = []
    first_due = (timed[0].due_at or timed[0].started_at) if timed else run_at
    if ended is not None and not timed and first_due is not None:
        first_due = min(first_due, ended)  # cancelled before it ran
    begin = created or first_due
    if begin is not None and first_due is not None:
        planned = not timed and ended is None and first_due > now
        # (a job waiting for others has no due time yet: its run_at is when it was created)
        status = WAITING if state == WAITING and not timed else "scheduled"
        spans.append(Span("scheduled", status, begin, max(begin, first_due), planned=planned))
    for i, a in enumerate(timed):
        start = a.started_at
        assert start is not None
        r = a.record
        if i > 0 and (before := timed[i - 1].record.finished_at) is not None:
            wait_end = max(before, a.due_at or start)
            spans.append(Span("retry_wait", "waited", before, wait_end, attempt=a.number))
        status = r.outcome or "running"  # (in flight, or its end not yet in the audit)
        end = r.finished_at if r.outcome is not None else None
        spans.append(Span("attempt", status, start, end, attempt=a.number, due=a.due_at))
    last = timed[-1].record if timed else None
    upcoming = job.next_attempt_at if job is not None else None
    if last is not None and last.finished_at is not None and upcoming is not None:
        spans.append(
            Span(
                "retry_wait",
                "waiting",
                last.finished_at,
                max(last.finished_at, upcoming),
                attempt=last.attempt + 1,
                planned=upcoming > now,
            )
        )
    if ended is not None:
        spans.append(Span("terminal", state, ended, ended))
    return Timeline(state, spans, attempts, now)


# ---------------------------------------------------------------------------- drawing
WIDTH = 760  # the viewBox: the chart scales to its box (max-width in console.css)
LABEL_W = 96  # the rows' names, right-aligned
TEXT_W = 236  # what each row says, after the plot ("succeeded · 307 ms · 1 ms late" at 700 px)
ROW_H = 26
TOP = 30  # the time axis
_STEPS_MS = [
    n * unit
    for unit, ns in (
        (1, (1, 2, 5, 10, 20, 50, 100, 200, 500)),
        (1000, (1, 2, 5, 10, 15, 30)),
        (60_000, (1, 2, 5, 10, 15, 30)),
        (3_600_000, (1, 2, 3, 6, 12)),
        (86_400_000, (1, 2, 7, 14, 30, 90, 365)),
    )
    for n in ns
]


def _step(span_ms: int) -> int:
    """A round tick interval giving at most five intervals over `span_ms`."""
    return next((s for s in _STEPS_MS if span_ms / s <= 5), _STEPS_MS[-1])


def _offset(ms: int) -> str:
    """A tick's label: its offset from the chart's first instant, in its round unit."""
    if ms == 0:
        return "0"
    for unit, name in ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s")):
        if ms % unit == 0:
            return f"+{ms // unit} {name}"
    return f"+{duration(ms)}"


def svg(t: Timeline, job_id: str) -> str:
    """The timeline as an inline SVG (role img, titled and described in words; each span a
    group with its kind, status and attempt as data attributes and its sentence as a title).
    An empty string when there is nothing to draw."""
    bounds = t.bounds()
    if bounds is None:
        return ""
    t0, t1 = bounds
    span_ms = max(_ms(t1 - t0), 1)
    left, right = LABEL_W + 10, WIDTH - TEXT_W - 10
    plot_w = right - left

    def x(at: datetime) -> float:
        return left + plot_w * min(_ms(at - t0) / span_ms, 1.0)

    rows = t.spans
    height = TOP + ROW_H * len(rows) + (16 if t.live else 10)  # (room for "now" below)
    bottom = TOP + ROW_H * len(rows)
    words = "; ".join(s.describe(t.now) for s in rows)
    title = f"Attempt timeline of job {job_id}"
    out = [
        f'<svg class="timeline" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" '
        'role="img" aria-labelledby="timeline-title timeline-desc" '
        f'data-state="{escape(t.state)}">',
        f'<title id="timeline-title">{escape(title)}</title>',
        f'<desc id="timeline-desc">{escape(words)}.</desc>',
        '<g class="tl-axis">',
    ]
    step = _step(span_ms)
    for k in range(0, span_ms // step + 1):
        tx = left + plot_w * k * step / span_ms
        out.append(
            f'<line class="tl-grid" x1="{tx:.1f}" x2="{tx:.1f}" y1="{TOP - 6}" y2="{bottom}"/>'
        )
        anchor = "start" if k == 0 else ("end" if tx > right - 30 else "middle")
        out.append(
            f'<text x="{tx:.1f}" y="{TOP - 10}" text-anchor="{anchor}">{_offset(k * step)}</text>'
        )
    out.append("</g>")
    for i, s in enumerate(rows):
        out.append(_row(s, i, x, t.now, right))
    if t.live and t0 <= t.now <= t1:
        nx = x(t.now)
        out.append(
            f'<g class="tl-now"><line x1="{nx:.1f}" x2="{nx:.1f}" y1="{TOP - 4}" y2="{bottom}"/>'
            f'<text x="{nx:.1f}" y="{bottom + 9}" text-anchor="middle">now</text>'
            f"<title>now: {rfc3339(t.now)}</title></g>"
        )
    out.append("</svg>")
    return "".join(out)


def _row(s: Span, i: int, x: Callable[[datetime], float], now: datetime, right: int) -> str:
    """One span's row: its name, its mark on the time axis, and what it says."""
    y = TOP + i * ROW_H
    mid = y + ROW_H / 2
    classes = " ".join(
        c
        for c in (
            "tl-span",
            s.kind,
            s.status,
            "planned" if s.planned else "",
            "open" if s.end is None else "",
        )
        if c
    )
    attempt = f' data-attempt="{s.attempt}"' if s.attempt is not None else ""
    parts = [
        f'<g class="{escape(classes)}" data-kind="{s.kind}" data-status="{escape(s.status)}"'
        f"{attempt}>",
        f"<title>{escape(s.describe(now))}</title>",
        f'<text class="tl-label" x="{LABEL_W}" y="{mid + 4:.1f}" text-anchor="end">'
        f"{escape(s.label)}</text>",
    ]
    x0, x1 = x(s.start), x(s.until(now))
    if s.kind == "scheduled":
        parts.append(
            f'<line class="tl-line" x1="{x0:.1f}" x2="{max(x1, x0 + 1):.1f}" '
            f'y1="{mid}" y2="{mid}"/>'
            f'<circle class="tl-dot" cx="{x0:.1f}" cy="{mid}" r="3.5"/>'
            + _diamond("tl-due", x1, mid, 5)
        )
    elif s.kind == "terminal":
        parts.append(_diamond("tl-end", x0, mid, 7))
    else:
        tall = 14 if s.kind == "attempt" else 8
        if s.kind == "attempt" and s.due is not None and s.due < s.start:
            xd = x(s.due)
            parts.append(
                f'<line class="tl-late" x1="{xd:.1f}" x2="{x0:.1f}" y1="{mid}" y2="{mid}"/>'
                f'<line class="tl-late" x1="{xd:.1f}" x2="{xd:.1f}" y1="{mid - 4}" y2="{mid + 4}"/>'
            )
        parts.append(
            f'<rect class="tl-bar" x="{x0:.1f}" y="{mid - tall / 2}" '
            f'width="{max(x1 - x0, 3):.1f}" height="{tall}" rx="2"/>'
        )
    parts.append(
        f'<text class="tl-text" x="{right + 10}" y="{mid + 4:.1f}">{escape(s.summary(now))}</text>'
    )
    parts.append("</g>")
    return "".join(parts)


def _diamond(cls: str, cx: float, cy: float, r: float) -> str:
    return (
        f'<path class="{cls}" d="M{cx:.1f} {cy - r:.1f}L{cx + r:.1f} {cy:.1f}'
        f'L{cx:.1f} {cy + r:.1f}L{cx - r:.1f} {cy:.1f}Z"/>'
    )
