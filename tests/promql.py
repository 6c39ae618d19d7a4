"""A small PromQL evaluator for the dashboard tests: enough of the language for the
queries dashboards/generate.py writes, evaluated over scrapes of Prometheus text.

Supported: selectors with `{label="v"}` matchers and a range (`[$__rate_interval]`
or `[5m]`: the range is always "every scrape given"), `rate`/`increase`,
`histogram_quantile` (Prometheus's bucket interpolation), `sum|max|min|avg|count`
with `by (...)` or `without (...)`, `+ - * /` between vectors (one-to-one on all
labels) and numbers, parentheses. `rate` is (last - first) / seconds between the
first and last scrape, counter resets counted, without Prometheus's extrapolation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]
Vector = dict[Labels, float]
AGGREGATIONS = {"sum": sum, "max": max, "min": min, "count": len, "avg": lambda v: sum(v) / len(v)}
TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)|(?P<str>\"[^\"]*\")"
    r"|(?P<range>\[[^\]]*\])|(?P<op>[-+*/(){},=]))"
)


@dataclass
class Samples:
    """Series (labels with __name__) -> [(time s, value)], in scrape order."""

    series: dict[Labels, list[tuple[float, float]]] = field(default_factory=dict)

    @classmethod
    def of(cls, text: str) -> Samples:
        """One scrape's samples."""
        out = cls()
        out.add_scrape(text, 0.0)
        return out

    def add_scrape(self, text: str, at: float, **extra: str) -> None:
        """Add one scrape's Prometheus text, its samples taken at `at` (extra: e.g.
        instance=...)."""
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = frozenset({**s.labels, **extra, "__name__": s.name}.items())
                self.series.setdefault(labels, []).append((at, s.value))

    def names(self) -> set[str]:
        return {dict(labels)["__name__"] for labels in self.series}


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """Prometheus's bucketQuantile: (upper bound `le`, cumulative count) pairs -> the q-quantile,
    linear inside the bucket holding rank q * total (the first bucket's lower bound is 0)."""
    b = sorted(buckets)
    if q < 0 or q > 1:
        return -math.inf if q < 0 else math.inf
    if len(b) < 2 or not math.isinf(b[-1][0]):
        return math.nan
    for i in range(1, len(b)):  # counts must not decrease (Prometheus fixes such float noise too)
        b[i] = (b[i][0], max(b[i][1], b[i - 1][1]))
    total = b[-1][1]
    if total == 0:
        return math.nan
    rank = q * total
    i = next(i for i, (_, count) in enumerate(b) if count >= rank)
    if i == len(b) - 1:
        return b[-2][0]
    if i == 0 and b[0][0] <= 0:
        return b[0][0]
    start, end, count = 0.0, b[i][0], b[i][1]
    if i > 0:
        start, count, rank = b[i - 1][0], count - b[i - 1][1], rank - b[i - 1][1]
    return start + (end - start) * (rank / count)


def _drop(labels: Labels, *names: str) -> Labels:
    return frozenset((k, v) for k, v in labels if k not in names)


class Evaluator:
    """`Evaluator(samples).eval(expr)` -> a Vector (labels without __name__ -> value) or a float."""

    def __init__(self, samples: Samples) -> None:
        self.samples = samples
        self.tokens: list[tuple[str, str]] = []

    def eval(self, expr: str) -> Vector | float:
        self.tokens = [(m.lastgroup or "", m.group(m.lastgroup or 0)) for m in TOKEN.finditer(expr)]
        if "".join(t for _, t in self.tokens).replace(" ", "") != expr.replace(" ", ""):
            raise ValueError(f"cannot tokenize {expr!r}")
        out = self._sum()
        if self.tokens:
            raise ValueError(f"unparsed rest of {expr!r}: {self.tokens}")
        return out

    # ------------------------------------------------------------------ parsing
    def _peek(self) -> str:
        return self.tokens[0][1] if self.tokens else ""

    def _take(self, want: str | None = None) -> tuple[str, str]:
        kind, text = self.tokens.pop(0)
        if want is not None and text != want:
            raise ValueError(f"expected {want!r}, got {text!r}")
        return kind, text

    def _sum(self) -> Vector | float:
        left = self._product()
        while self._peek() in ("+", "-"):
            op = self._take()[1]
            left = _binary(op, left, self._product())
        return left

    def _product(self) -> Vector | float:
        left = self._primary()
        while self._peek() in ("*", "/"):
            op = self._take()[1]
            left = _binary(op, left, self._primary())
        return left

    def _primary(self) -> Vector | float:
        kind, text = self._take()
        if kind == "num":
            return float(text)
        if text == "(":
            inner = self._sum()
            self._take(")")
            return inner
        if text in AGGREGATIONS:
            return self._aggregation(text)
        if text in ("rate", "increase"):
            self._take("(")
            ranged = self._selector(self._take()[1], ranged=True)
            self._take(")")
            return _rate(ranged, per_second=text == "rate")  # type: ignore[arg-type]
        if text == "histogram_quantile":
            self._take("(")
            q = self._sum()
            self._take(",")
            vector = self._sum()
            self._take(")")
            assert isinstance(q, float) and isinstance(vector, dict)
            return _quantiles(q, vector)
        if kind == "name":
            return self._selector(text, ranged=False)  # type: ignore[return-value]
        raise ValueError(f"unexpected {text!r}")

    def _labels(self) -> list[str]:
        self._take("(")
        names = []
        while self._peek() != ")":
            names.append(self._take()[1])
            if self._peek() == ",":
                self._take()
        self._take(")")
        return names

    def _aggregation(self, op: str) -> Vector:
        grouping: tuple[str, list[str]] = ("by", [])  # no clause: everything in one group
        if self._peek() in ("by", "without"):
            grouping = (self._take()[1], self._labels())
        self._take("(")
        inner = self._sum()
        self._take(")")
        if self._peek() in ("by", "without"):
            grouping = (self._take()[1], self._labels())
        assert isinstance(inner, dict), "aggregating a number"
        mode, names = grouping
        groups: dict[Labels, list[float]] = {}
        for labels, value in inner.items():
            key = (
                frozenset((k, v) for k, v in labels if k in names)
                if mode == "by"
                else _drop(labels, *names)
            )
            groups.setdefault(key, []).append(value)
        return {key: float(AGGREGATIONS[op](values)) for key, values in groups.items()}  # type: ignore[operator]

    def _selector(
        self, name: str, ranged: bool
    ) -> dict[Labels, list[tuple[float, float]]] | Vector:
        matchers: dict[str, str] = {}
        if self._peek() == "{":
            self._take()
            while self._peek() != "}":
                label = self._take()[1]
                self._take("=")
                matchers[label] = self._take()[1].strip('"')
                if self._peek() == ",":
                    self._take()
            self._take("}")
        if ranged:
            kind, _ = self._take()
            assert kind == "range", f"{name}: rate needs a range selector"
        picked = {
            labels: points
            for labels, points in self.samples.series.items()
            if dict(labels)["__name__"] == name
            and all(dict(labels).get(k) == v for k, v in matchers.items())
        }
        if ranged:
            return picked
        last = max((t for points in self.samples.series.values() for t, _ in points), default=0.0)
        return {
            _drop(labels, "__name__"): points[-1][1]
            for labels, points in picked.items()
            if points[-1][0] == last
        }


def _rate(ranged: dict[Labels, list[tuple[float, float]]], per_second: bool) -> Vector:
    out: Vector = {}
    for labels, points in ranged.items():
        if len(points) < 2:
            continue
        increase = sum(
            b - a if b >= a else b for (_, a), (_, b) in zip(points, points[1:], strict=False)
        )
        seconds = points[-1][0] - points[0][0]
        out[_drop(labels, "__name__")] = increase / seconds if per_second else increase
    return out


def _quantiles(q: float, vector: Vector) -> Vector:
    groups: dict[Labels, list[tuple[float, float]]] = {}
    for labels, value in vector.items():
        le = dict(labels).get("le")
        if le is not None:
            groups.setdefault(_drop(labels, "le"), []).append((float(le), value))
    return {labels: histogram_quantile(q, buckets) for labels, buckets in groups.items()}


def _div(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a)
    return a / b


OPS: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _div,
}


def _binary(op: str, left: Vector | float, right: Vector | float) -> Vector | float:
    f = OPS[op]
    if isinstance(left, float) and isinstance(right, float):
        return f(left, right)
    if isinstance(left, float):
        return {k: f(left, v) for k, v in right.items()}  # type: ignore[union-attr]
    if isinstance(right, float):
        return {k: f(v, right) for k, v in left.items()}
    return {k: f(v, right[k]) for k, v in left.items() if k in right}  # one-to-one on all labels
