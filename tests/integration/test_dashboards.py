"""The Grafana dashboards: valid for their schema version, equal to what
dashboards/generate.py writes, and every panel of the operations dashboard
returning data from the documented deployment (a worker and a producer
process, each scraped)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.procs.deployment import Deployment
from tests.promql import Evaluator, Samples, Vector

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
PANEL_TYPES = {"timeseries", "stat", "table", "gauge", "barchart", "bargauge", "piechart", "text"}
CONTRACT_METRICS = {
    "app_schedule_job_no_listener_total",
    "horae_jobs_scheduled_total",
    "horae_attempts_total",
    "horae_jobs_completed_total",
    "horae_jobs_failed_total",
    "horae_jobs_cancelled_total",
    "horae_retries_total",
    "horae_attempt_duration_seconds",
    "horae_job_lateness_seconds",
    "horae_jobs",
    "horae_audit_outbox_pending",
    "horae_audit_outbox_oldest_age_seconds",
    "horae_worker_active_attempts",
}


def load(name: str) -> dict[str, Any]:
    return json.loads((DASHBOARDS / name).read_text())  # type: ignore[no-any-return]


def generator() -> Any:
    spec = importlib.util.spec_from_file_location("dash_generate", DASHBOARDS / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["horae-operations.json", "horae-failure-analytics.json"])
def test_dashboard_is_valid_for_its_schema_version(name: str) -> None:
    dash = load(name)
    gen = generator()
    assert (DASHBOARDS / name).read_text() == gen.render()[name], (
        "run python dashboards/generate.py"
    )
    assert dash["schemaVersion"] == gen.SCHEMA_VERSION == 39
    assert dash["uid"] and dash["title"] and isinstance(dash["panels"], list) and dash["panels"]
    assert [v["name"] for v in dash["templating"]["list"]] == ["datasource"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    cells: set[tuple[int, int]] = set()
    for panel in dash["panels"]:
        assert panel["type"] in PANEL_TYPES and panel["title"]
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in ("h", "w", "x", "y"))
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & mine, f"panel {panel['title']!r} overlaps another"
        cells |= mine
        assert panel["datasource"]["uid"] == "${datasource}"
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs))
        for target in panel["targets"]:
            assert target.get("expr") or target.get("rawSql"), panel["title"]


def prom_usage(dash: dict[str, Any]) -> list[tuple[str, str, set[str]]]:
    """(panel, metric, labels used) for every metric a Prometheus query names."""
    out = []
    for panel in dash["panels"]:
        for target in panel["targets"]:
            expr, legend = target["expr"], target.get("legendFormat", "")
            labels = set(re.findall(r"\{\{(\w+)\}\}", legend))
            for group in re.findall(r"by \(([^)]*)\)", expr):
                labels |= {g.strip() for g in group.split(",")}
            for metric in set(re.findall(r"\b((?:horae|app)_[a-z_]+)\b", expr)):
                out.append((panel["title"], metric, labels))
    return out


def panel_queries(dash: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(panel title, legend, PromQL) of every target."""
    return [
        (p["title"], t.get("legendFormat", ""), t["expr"])
        for p in dash["panels"]
        for t in p["targets"]
    ]


def by_labels(expr: str) -> set[str]:
    return {
        g.strip() for group in re.findall(r"by \(([^)]*)\)", expr) for g in group.split(",")
    } - {"le"}


def values(result: Vector | float, label: str) -> dict[str, float]:
    assert isinstance(result, dict)
    return {dict(labels).get(label, ""): v for labels, v in result.items()}


@pytest.fixture
def deployment(
    redis_url: str, database_url: str, namespace: str, tmp_path: Path
) -> Iterator[Deployment]:
    dep = Deployment(redis_url, database_url, namespace, tmp_path)
    yield dep
    dep.close()


async def test_every_panel_returns_data_from_the_documented_deployment(
    deployment: Deployment,
) -> None:
    """A worker and a producer process, each scraped after each of two waves of jobs; every
    panel's PromQL, evaluated over the two scrapes (tests/promql.py), returns a series,
    each with the labels its legend and `by` clause name, and a number (not NaN)."""
    dep = deployment
    await asyncio.to_thread(dep.wait_ready)
    samples = Samples()
    scraped: dict[str, set[str]] = {}
    for _ in range(2):
        await asyncio.to_thread(dep.wave)
        await asyncio.sleep(0.5)  # a few housekeeping rounds (0.2 s) refresh the worker's gauges
        at = (
            time.time()
        )  # one scrape round, one timestamp (the instant queries read the last round)
        for name, text in (await asyncio.to_thread(dep.scrape)).items():
            samples.add_scrape(text, at, instance=name)
            scraped[name] = Samples.of(text).names()
    assert "horae_jobs_scheduled_total" in scraped["producer"], (
        "the producer exports what it schedules"
    )
    usage = prom_usage(load("horae-operations.json"))
    assert {re.sub(r"_(bucket|count|sum)$", "", m) for _, m, _ in usage} == CONTRACT_METRICS
    results: dict[tuple[str, str], Vector | float] = {}
    for title, legend, expr in panel_queries(load("horae-operations.json")):
        result = Evaluator(samples).eval(expr)
        results[title, legend] = result
        assert isinstance(result, dict) and result, f"{title!r} ({legend}): {expr} returns no data"
        wanted = by_labels(expr) | set(re.findall(r"\{\{(\w+)\}\}", legend))
        for labels, value in result.items():
            assert wanted <= dict(labels).keys(), f"{title!r}: {dict(labels)} lacks {wanted}"
        assert any(not math.isnan(v) for v in result.values()), (
            f"{title!r} ({legend}): only NaN {result}"
        )
    scheduled = values(results["Jobs scheduled / s by topic", "{{topic}}"], "topic")
    assert (
        scheduled.keys() >= {"ok", "bad", "nobody"}
        and min(scheduled[t] for t in ("ok", "bad", "nobody")) > 0
    )
    ratio = values(results["Failure ratio by topic (failed / finished)", "{{topic}}"], "topic")
    assert ratio["ok"] == 0.0 and ratio["bad"] == 1.0, (
        ratio
    )  # "ok": failed counts from 0, not missing
    lateness = values(results["Lateness p50 / p99 (start - due)", "p50 {{topic}}"], "topic")
    assert 0 < lateness["ok"] < 2.0, (
        lateness
    )  # the default buckets said 2.5 s for any lateness under 5 s
    assert values(results["Jobs with no listener / s by topic", "{{topic}}"], "topic")["nobody"] > 0
    assert values(results["Completed / failed / cancelled per s", "cancelled"], "")[""] > 0


def test_analytics_dashboard_reads_the_nightly_tables() -> None:
    sql = " ".join(
        t["rawSql"] for p in load("horae-failure-analytics.json")["panels"] for t in p["targets"]
    )
    assert "schedule_failure_stats" in sql and "schedule_error_signatures" in sql
