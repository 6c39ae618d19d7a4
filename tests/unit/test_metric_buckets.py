"""The time histograms have second-scale buckets: a known latency recorded through
`Metrics` under the provider `setup_telemetry` builds (in a child process: the
providers are process-wide), scraped as Prometheus text, gives back about that
latency from the dashboard's own histogram_quantile query."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.ops.servers import free_port
from tests.promql import Evaluator, Samples, histogram_quantile

ROOT = Path(__file__).resolve().parents[2]
LATENCY_S = 0.005
CHILD = """
import sys, urllib.request
import scheduler
from scheduler.core.config import TelemetrySettings
from scheduler.observe.metrics import Metrics
from scheduler.observe.telemetry import setup_telemetry

port, latency = int(sys.argv[1]), float(sys.argv[2])
setup_telemetry(TelemetrySettings(exporter="prometheus", metrics_port=port))
m = Metrics()

def scrape():
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()

def record(n):
    for _ in range(n):
        m.lateness.record(latency, {"topic": "t"})
        m.attempt_duration.record(latency, {"topic": "t"})

record(1)
first = scrape()
record(200)
print(scheduler.__file__)
print(first + "\\n#---\\n" + scrape())
"""


def dashboard_queries(title_part: str) -> list[str]:
    dash = json.loads((ROOT / "dashboards" / "horae-operations.json").read_text())
    return [t["expr"] for p in dash["panels"] if title_part in p["title"] for t in p["targets"]]


@pytest.fixture(scope="module")
def scraped() -> Samples:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(free_port()), str(LATENCY_S)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    code, _, text = out.stdout.partition("\n")
    assert Path(code).is_relative_to(ROOT), f"the child ran {code}, not this tree's code"
    first, _, second = text.partition("\n#---\n")
    samples = Samples()
    samples.add_scrape(first, 0.0)
    samples.add_scrape(second, 15.0)
    return samples


@pytest.mark.parametrize("panel", ["Lateness p50 / p99", "Attempt duration p50 / p99"])
def test_the_dashboard_quantile_of_a_5ms_latency_is_about_5ms(scraped: Samples, panel: str) -> None:
    queries = dashboard_queries(panel)
    assert [q.split(",")[0] for q in queries] == [
        "histogram_quantile(0.5",
        "histogram_quantile(0.99",
    ]
    for expr in queries:
        result = Evaluator(scraped).eval(expr)
        assert isinstance(result, dict) and len(result) == 1, result
        ((labels, value),) = result.items()
        assert dict(labels)["topic"] == "t"
        # 5 ms lands in the (2.5 ms, 5 ms] bucket: p50 3.75 ms, p99 4.975 ms (the default
        # buckets gave 2.5 s and 4.95 s)
        assert 0.0025 <= value <= LATENCY_S, f"{expr} = {value} s for a {LATENCY_S} s latency"


def test_buckets_run_from_1ms_to_1h(scraped: Samples) -> None:
    les = {
        float(dict(labels)["le"])
        for labels in scraped.series
        if dict(labels)["__name__"] == "horae_job_lateness_seconds_bucket"
    }
    assert min(les) == 0.001 and max(les - {math.inf}) == 3600.0 and math.inf in les
    assert len(les) >= 15, sorted(les)


def test_histogram_quantile_interpolates_as_prometheus_does() -> None:
    inf = math.inf
    assert histogram_quantile(0.5, [(0.1, 0), (0.5, 10), (inf, 10)]) == pytest.approx(0.3)
    assert histogram_quantile(0.5, [(0.1, 10), (inf, 10)]) == pytest.approx(
        0.05
    )  # first bucket from 0
    assert (
        histogram_quantile(0.99, [(1.0, 1), (inf, 10)]) == 1.0
    )  # in +Inf: the highest finite bound
    assert math.isnan(histogram_quantile(0.5, [(1.0, 0), (inf, 0)]))
    assert math.isnan(histogram_quantile(0.5, [(1.0, 3)]))  # no +Inf bucket
