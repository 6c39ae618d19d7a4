"""The deployment material (docs/how-to/deploying.md) read as its tools read it: the Dockerfile's
stages, the Kubernetes manifests, the compose file with its Prometheus and Grafana files, and
the systemd units. Every command is parsed by the real `horae` CLI; every probe's path and port
matches the health port its command serves; every stop timeout exceeds the worker's grace."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from audit.analytics.settings import AnalyticsSettings
from scheduler.core.config import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
COMPOSE = DEPLOY / "compose"
SYSTEMD = DEPLOY / "systemd"
HEALTH = {"/healthz", "/readyz"}


def horae_command(args: list[str]) -> tuple[str, dict[str, Any]]:
    """(the subcommand's path, its parsed options) as `horae ARGS` would see them; a usage
    error (unknown command or option, bad value) fails the test."""
    from scheduler.cli.main import cli

    cmd: click.Command = cli
    names: list[str] = []
    rest = list(args)
    while isinstance(cmd, click.Group):
        assert rest, f"horae {' '.join(args)}: no command"
        sub = cmd.commands.get(rest[0])
        assert sub is not None, f"horae {' '.join(args)}: no command {rest[0]!r}"
        names.append(rest.pop(0))
        cmd = sub
    ctx = cmd.make_context(" ".join(names), rest)
    return " ".join(names), ctx.params


def served_port(args: list[str]) -> int:
    """The port of /healthz and /readyz of this command: --health-port, or the console's --port."""
    command, params = horae_command(args)
    port = params["port"] if command == "console" else params["health_port"]
    assert isinstance(port, int), (args, params)
    return port


def grace_of(args: list[str], env: dict[str, str]) -> float:
    params = horae_command(args)[1]
    if params.get("grace") is not None:
        return float(params["grace"])
    return float(env.get("HORAE_WORKER__GRACE_S", WorkerSettings().grace_s))


# ----------------------------------------------------------------------------- Dockerfile
def _stages() -> list[list[str]]:
    lines, stages = (ROOT / "Dockerfile").read_text().splitlines(), []
    joined = " \n".join(lines).replace("\\ \n", " ")
    for line in joined.split("\n"):
        line = line.strip()
        if line.startswith("FROM "):
            stages.append([line])
        elif stages and line and not line.startswith("#"):
            stages[-1].append(line)
    return stages


def test_dockerfile_is_multi_stage_non_root_without_a_compiler_with_horae_as_entry_point() -> None:
    stages = _stages()
    assert len(stages) >= 2 and stages[0][0].endswith(" AS build"), [s[0] for s in stages]
    final = stages[-1]
    assert any(line.startswith("COPY --from=build ") for line in final)
    assert 'ENTRYPOINT ["horae"]' in final
    users = [line.split()[1] for line in final if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root"), users
    build_tools = re.compile(r"\b(gcc|g\+\+|clang|build-essential|make|python3-dev|libc6-dev)\b")
    assert not [line for line in final if line.startswith("RUN ") and build_tools.search(line)]
    assert "--only-binary=:all:" in " ".join(stages[0])  # nor does the build stage compile anything
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".horae", ".git"} <= set(ignored)


# ----------------------------------------------------------------------------- Kubernetes
def _manifests() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    return doc["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def _by(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in _manifests() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(
        p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml"
    )


@pytest.mark.parametrize("name", ["horae-worker", "horae-relay", "horae-console"])
def test_deployments_probe_the_port_and_paths_their_command_serves(name: str) -> None:
    doc = _by("Deployment", name)
    spec = _pod_spec(doc)
    assert (
        doc["spec"]["selector"]["matchLabels"].items()
        <= doc["spec"]["template"]["metadata"]["labels"].items()
    )
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    port = served_port(container["args"])
    assert port in {p["containerPort"] for p in container["ports"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}
    if "startupProbe" in container:
        assert container["startupProbe"]["httpGet"]["path"] in HEALTH
    # A probe must not give up before the readiness checks' own 2 s bound per dependency.
    assert container["readinessProbe"]["timeoutSeconds"] >= 3


def test_the_worker_drains_before_kubernetes_kills_it_and_a_budget_guards_it() -> None:
    doc = _by("Deployment", "horae-worker")
    spec = _pod_spec(doc)
    (container,) = spec["containers"]
    pre_stop = container.get("lifecycle", {}).get("preStop", {})
    pre_stop_s = int(pre_stop["exec"]["command"][-1]) if pre_stop else 0
    grace = grace_of(container["args"], _env(container))
    assert spec["terminationGracePeriodSeconds"] > pre_stop_s + grace + 5, (
        spec["terminationGracePeriodSeconds"],
        grace,
    )
    assert horae_command(container["args"])[1]["metrics_port"] == int(
        doc["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"]
    )
    pdb = _by("PodDisruptionBudget", "horae-worker")
    assert pdb["spec"]["selector"]["matchLabels"] == doc["spec"]["selector"]["matchLabels"]
    config = _by("ConfigMap", "horae-example-app")
    assert config["data"]["example_app.py"] == (DEPLOY / "example" / "example_app.py").read_text()
    assert (
        horae_command(container["args"])[1]["app"] == "example_app"
        and _env(container)["PYTHONPATH"] == "/app"
    )


def test_the_console_takes_its_tokens_from_a_secret_and_stops_after_its_endpoint_is_gone() -> None:
    (container,) = _pod_spec(_by("Deployment", "horae-console"))["containers"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    secret = _by("Secret", "horae-console")
    for name in ("HORAE_CONSOLE__VIEWER_TOKEN", "HORAE_CONSOLE__OPERATOR_TOKEN"):
        assert (
            refs[name]["name"] == "horae-console" and refs[name]["key"] in secret["stringData"]
        ), name
    assert container["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"
    assert horae_command(container["args"])[1]["host"] == "0.0.0.0"  # (needs the tokens above)
    assert "HORAE_AUDIT__RELAY" not in _env(
        container
    )  # its Scheduler opens the audit trail only with relay on
    service = _by("Service", "horae-console")
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def test_migrations_run_as_a_job_and_the_nightly_report_as_a_cronjob() -> None:
    (migrate,) = _pod_spec(_by("Job", "horae-migrate"))["containers"]
    assert horae_command(migrate["args"])[0] == "migrate"
    cron = _by("CronJob", "horae-nightly")
    (report,) = _pod_spec(cron)["containers"]
    assert horae_command(report["args"])[0] == "report"
    defaults = AnalyticsSettings()
    assert (cron["spec"]["schedule"], cron["spec"]["timeZone"]) == (
        defaults.nightly_cron,
        defaults.nightly_tz,
    )
    for doc in _manifests():
        if doc["kind"] in ("Deployment", "Job", "CronJob"):
            for container in _pod_spec(doc)["containers"]:
                refs = [e["secretRef"]["name"] for e in container.get("envFrom", [])]
                assert refs == ["horae-urls"], doc["metadata"]["name"]
    urls = _by("Secret", "horae-urls")["stringData"]
    assert set(urls) == {"HORAE_REDIS_URL", "HORAE_DATABASE_URL"}


# ----------------------------------------------------------------------------- compose
def _compose() -> dict[str, Any]:
    return yaml.safe_load((COMPOSE / "compose.yaml").read_text())  # type: ignore[no-any-return]


def _seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+)s", text)
    assert match, text
    return float(match.group(1))


def test_compose_runs_the_stack_with_probes_on_the_served_ports() -> None:
    services = _compose()["services"]
    assert {
        "redis",
        "postgres",
        "migrate",
        "worker",
        "relay",
        "console",
        "prometheus",
        "grafana",
    } <= set(services)
    assert (
        services["redis"]["command"][services["redis"]["command"].index("--appendonly") + 1]
        == "yes"
    )
    assert horae_command(services["migrate"]["command"])[0] == "migrate"
    for name in ("worker", "relay", "console"):
        service = services[name]
        port = served_port(service["command"])
        probe = " ".join(service["healthcheck"]["test"])
        assert f"http://127.0.0.1:{port}/readyz" in probe, (name, probe)
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    worker = services["worker"]
    env = {**services["migrate"]["environment"], **worker["environment"]}
    assert _seconds(worker["stop_grace_period"]) > grace_of(worker["command"], env) + 5
    assert horae_command(worker["command"])[1]["app"] == "example_app"
    assert "../example:/app:ro" in worker["volumes"] and env["PYTHONPATH"] == "/app"
    assert "HORAE_CONSOLE__OPERATOR_TOKEN" in services["console"]["environment"]
    assert (
        "HORAE_AUDIT__RELAY" not in services["console"]["environment"]
    )  # (the audit pages need it on)


def test_compose_prometheus_scrapes_the_worker_and_grafana_provisions_the_dashboards() -> None:
    services = _compose()["services"]
    metrics = horae_command(services["worker"]["command"])[1]["metrics_port"]
    scrape = yaml.safe_load((COMPOSE / "prometheus.yml").read_text())
    targets = [
        t for job in scrape["scrape_configs"] for c in job["static_configs"] for t in c["targets"]
    ]
    assert f"worker:{metrics}" in targets
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in services["grafana"]["volumes"])
    assert (
        COMPOSE / mounts["./grafana/provisioning"].replace("/etc/grafana/provisioning", "")
    ).exists()
    dashboards_dir = mounts["../../dashboards"]
    assert (COMPOSE / "../../dashboards").resolve() == ROOT / "dashboards"
    provider = yaml.safe_load((COMPOSE / "grafana/provisioning/dashboards/horae.yaml").read_text())
    assert provider["providers"][0]["options"]["path"] == dashboards_dir
    sources = yaml.safe_load((COMPOSE / "grafana/provisioning/datasources/horae.yaml").read_text())[
        "datasources"
    ]
    kinds = {s["type"] for s in sources}
    import json

    for board in (ROOT / "dashboards").glob(
        "*.json"
    ):  # each dashboard's datasource variable has a source
        (variable,) = [
            v
            for v in json.loads(board.read_text())["templating"]["list"]
            if v["type"] == "datasource"
        ]
        assert variable["query"] in kinds, board.name


# ----------------------------------------------------------------------------- systemd
def _unit(path: Path) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            values.setdefault(key, []).append(value)
    return values


def test_systemd_units_run_the_same_commands() -> None:
    units = {p.name: _unit(p) for p in SYSTEMD.glob("*.service")}
    assert set(units) == {
        "horae-worker.service",
        "horae-relay.service",
        "horae-console.service",
        "horae-migrate.service",
        "horae-nightly.service",
    }
    commands = {}
    for name, unit in units.items():
        binary, *args = unit["ExecStart"][0].split()
        assert binary == "/opt/horae/bin/horae" and unit["User"] == ["horae"], name
        commands[name] = horae_command(args)[0]
        if name in ("horae-worker.service", "horae-relay.service"):
            assert served_port(args) > 0
    assert commands == {
        "horae-worker.service": "worker",
        "horae-relay.service": "audit relay",
        "horae-console.service": "console",
        "horae-migrate.service": "migrate",
        "horae-nightly.service": "report",
    }
    worker = units["horae-worker.service"]
    env = dict(pair.split("=", 1) for pair in " ".join(worker["Environment"]).split())
    assert (
        float(worker["TimeoutStopSec"][0]) > grace_of(worker["ExecStart"][0].split()[1:], env) + 5
    )
    assert _unit(SYSTEMD / "horae-nightly.timer")["Unit"] == ["horae-nightly.service"]
    assert "HORAE_AUDIT__RELAY=false" not in " ".join(
        units["horae-console.service"].get("Environment", [])
    )


def test_systemd_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    horae = Path(sys.executable).with_name("horae")  # (verify wants ExecStart's binary to exist)
    for path in [*SYSTEMD.glob("*.service"), *SYSTEMD.glob("*.timer")]:
        (tmp_path / path.name).write_text(
            path.read_text().replace("/opt/horae/bin/horae", str(horae))
        )
    units = sorted(str(p) for p in tmp_path.iterdir())
    done = subprocess.run(
        [analyze, "verify", *units], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
