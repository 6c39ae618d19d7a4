"""The Grafana dashboards: valid for their schema version, equal to what
dashboards/generate.py writes, and querying only metrics (and labels) that
the code really emits in a real run."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState, Scheduler
from scheduler.config import load_settings
from scheduler.metrics import Metrics
from tests.integration.engine_fixtures import eventually

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
PANEL_TYPES = {"timeseries", "stat", "table", "gauge", "barchart", "bargauge", "piechart", "text"}
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")
CONTRACT_METRICS = {
    "app_schedule_job_no_listener_total", "horae_jobs_scheduled_total", "horae_attempts_total",
    "horae_jobs_completed_total", "horae_jobs_failed_total", "horae_jobs_cancelled_total", "horae_retries_total",
    "horae_attempt_duration_seconds", "horae_job_lateness_seconds", "horae_jobs", "horae_audit_outbox_pending",
    "horae_audit_outbox_oldest_age_seconds", "horae_worker_active_attempts",
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
    assert (DASHBOARDS / name).read_text() == gen.render()[name], "run python dashboards/generate.py"
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
        mine = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
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


async def test_every_queried_metric_is_emitted_with_those_labels(redis_url: str, database_url: str,
                                                                 namespace: str) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    reg = ListenerRegistry()

    @reg.on_event("ok")
    async def ok(event: ScheduleArrivedEvent) -> None:
        return None

    @reg.on_event("bad")
    async def bad(event: ScheduleArrivedEvent) -> None:
        raise RuntimeError("no")

    base = load_settings(env={}, redis_url=redis_url, database_url=database_url, namespace=namespace)
    settings = base.model_copy(update={"worker": base.worker.model_copy(update={"recover_interval_s": 0.05})})
    s = Scheduler(settings=settings, listeners=reg)
    s.metrics = Metrics(provider.get_meter("test"))
    async with s:
        jobs = [await s.schedule_in(t, 0, retry={"attempts": 2, "backoff": {"type": "fixed", "delay": 1000}})
                for t in ("ok", "bad", "nobody")]
        await s.cancel(await s.schedule_in("ok", "1h"))
        async with s.worker():
            for job_id in jobs:
                await eventually(lambda: _terminal(s, job_id), timeout=15, what="terminal")
            await asyncio.sleep(0.3)  # a few housekeeping rounds refresh the gauges
    emitted: dict[str, set[str]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                keys = emitted.setdefault(m.name, set())
                for point in m.data.data_points:
                    keys |= set(point.attributes)
    provider.shutdown()
    usage = prom_usage(load("horae-operations.json"))
    queried = {re.sub(r"_(bucket|count|sum)$", "", m) for _, m, _ in usage}
    assert queried == CONTRACT_METRICS, "the operations dashboard shows every contract metric"
    for panel, metric, labels in usage:
        name = metric
        for suffix in HISTOGRAM_SUFFIXES:
            if metric.endswith(suffix) and metric[: -len(suffix)] in emitted:
                name = metric[: -len(suffix)]
                labels = labels - {"le"}
        assert name in emitted, f"panel {panel!r} queries {metric}, which the code never emitted"
        assert labels <= emitted[name], f"panel {panel!r}: {metric} has labels {emitted[name]}, not {labels}"


async def _terminal(s: Scheduler, job_id: str) -> bool:
    info = await s.get_job(job_id)
    return info is not None and info.state in (JobState.COMPLETED, JobState.FAILED)


def test_analytics_dashboard_reads_the_nightly_tables() -> None:
    sql = " ".join(t["rawSql"] for p in load("horae-failure-analytics.json")["panels"] for t in p["targets"])
    assert "schedule_failure_stats" in sql and "schedule_error_signatures" in sql
