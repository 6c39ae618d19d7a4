"""`make test-deploy` (not part of `make test`): build the repository's Dockerfile with podman
and run the image as the deployment material does, against a redis-server of its own.

No registry of base images is assumed: the base (Debian bookworm's python3 and venv, nothing
else: no compiler) is built from Debian packages with mmdebstrap and `podman import`ed once.
Checks: the image builds; `horae` is the entry point; it runs as uid 10001; no compiler is in
it; a worker of deploy/example answers /healthz and /readyz on --health-port and metrics on
--metrics-port; /readyz turns 503 on SIGTERM (`podman stop`) and the worker exits 0; the
console answers its probes without a token while its API wants one.

Environment: PODMAN (podman), IMAGE (localhost/horae:test), BASE_IMAGE
(localhost/horae-base:bookworm), PIP_CA (a CA bundle for the package index, default the
machine's when it has one). Where the sandbox refuses something (crun with hybrid cgroups,
rlimits above the caller's), it says so and retries with runc and the caller's limits."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # (run as a script: the host side schedules with this tree's code)
PODMAN = os.environ.get("PODMAN", "podman")
IMAGE = os.environ.get("IMAGE", "localhost/horae:test")
BASE_IMAGE = os.environ.get("BASE_IMAGE", "localhost/horae-base:bookworm")
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
COMPILERS = ("gcc", "cc", "c++", "g++", "clang", "make", "ld")


def say(text: str) -> None:
    print(f"test-deploy: {text}", flush=True)


def fail(text: str) -> None:
    say(f"FAILED: {text}")
    sys.exit(1)


def run(args: list[str], check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, text=True, capture_output=True, **kw)  # type: ignore[call-overload]
    if check and done.returncode != 0:
        fail(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done  # type: ignore[no-any-return]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> tuple[int, dict[str, str] | str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            body = answer.read().decode()
            status = answer.status
    except urllib.error.HTTPError as exc:
        body, status = exc.read().decode(), exc.code
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def until(url: str, status: int, timeout: float, what: str) -> dict[str, str] | str:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            code, body = get(url)
            if code == status:
                return body
            last = (code, body)
        except OSError as exc:
            last = exc
        time.sleep(0.25)
    fail(f"{what}: {url} did not answer {status} within {timeout}s (last: {last})")
    raise AssertionError  # (fail exits)


def base_image() -> None:
    if run([PODMAN, "image", "exists", BASE_IMAGE], check=False).returncode == 0:
        say(f"base image {BASE_IMAGE} exists")
        return
    if not shutil.which("mmdebstrap"):
        fail(
            "mmdebstrap is missing (apt-get install mmdebstrap): "
            "the base image is built from Debian packages"
        )
    with tempfile.TemporaryDirectory() as tmp:
        tar = Path(tmp) / "base.tar"
        say(
            f"building {BASE_IMAGE} from Debian bookworm packages ({BASE_PACKAGES}) with mmdebstrap"
        )
        run(["mmdebstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", "bookworm", str(tar)])
        run([PODMAN, "import", str(tar), BASE_IMAGE])


def runtime_flags() -> tuple[list[str], list[str]]:
    """(global podman flags, run flags) under which a container starts here."""
    tries: list[tuple[list[str], list[str]]] = [([], [])]
    limits = [
        "--ulimit",
        f"nofile={min(_limit('-n'), 4096)}",
        "--ulimit",
        f"nproc={min(_limit('-u'), 4096)}",
    ]
    if shutil.which("runc"):
        tries.append((["--runtime", "runc"], limits))
    tries.append(([], ["--cgroups=disabled", *limits]))
    for glob, flags in tries:
        done = run([PODMAN, *glob, "run", "--rm", *flags, BASE_IMAGE, "true"], check=False)
        if done.returncode == 0:
            return glob, flags
        say(
            f"the sandbox refused `podman "
            f"{' '.join(glob + ['run'] + flags)}`: {done.stderr.strip()}"
        )
    fail("no container could start here (see the refusals above)")
    raise AssertionError


def _limit(flag: str) -> int:
    out = subprocess.run(
        ["sh", "-c", f"ulimit -H {flag}"], text=True, capture_output=True
    ).stdout.strip()
    return 1_048_576 if out in ("", "unlimited") else int(out)


def main() -> None:
    if not shutil.which(PODMAN):
        fail(f"{PODMAN} is missing (apt-get install podman runc)")
    base_image()
    glob, flags = runtime_flags()
    podman = [PODMAN, *glob]
    say(f"containers run with: podman {' '.join(glob)} run {' '.join(flags)}")

    ulimits = [part for i, f in enumerate(flags) if f == "--ulimit" for part in (f, flags[i + 1])]
    build = [
        *podman,
        "build",
        "--network",
        "host",
        *ulimits,
        "--build-arg",
        f"BASE={BASE_IMAGE}",
        "-t",
        IMAGE,
    ]
    ca = (
        os.environ.get("PIP_CA")
        or os.environ.get("PIP_CERT")
        or "/etc/ssl/certs/ca-certificates.crt"
    )
    if Path(ca).is_file():
        build += ["--secret", f"id=pip_ca,src={ca}"]
    say("building the Dockerfile")
    run([*build, str(ROOT)], cwd=ROOT)

    config = json.loads(run([*podman, "image", "inspect", IMAGE]).stdout)[0]["Config"]
    if config.get("Entrypoint") != ["horae"]:
        fail(f"the entry point is {config.get('Entrypoint')}, not ['horae']")
    if config.get("User") != "10001:10001":
        fail(f"the image's user is {config.get('User')!r}, not 10001:10001")
    image = [*podman, "run", "--rm", *flags]
    if "Usage: horae" not in run([*image, IMAGE, "--help"]).stdout:
        fail("`horae --help` in the image printed no usage")
    if run([*image, "--entrypoint", "id", IMAGE, "-u"]).stdout.strip() != "10001":
        fail("the image does not run as uid 10001")
    found = run(
        [
            *image,
            "--entrypoint",
            "sh",
            IMAGE,
            "-c",
            " ".join(f"command -v {c};" for c in COMPILERS) + " true",
        ]
    ).stdout.split()
    if found:
        fail(f"the final image holds build tools: {found}")
    say("image: entry point horae, uid 10001, no compiler")

    with tempfile.TemporaryDirectory() as tmp:
        redis_port = free_port()
        redis = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--dir",
                tmp,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        names: list[str] = []
        try:
            check_worker(image, podman, redis_port, names)
            check_console(image, podman, redis_port, names)
        finally:
            for name in names:
                run([*podman, "rm", "-f", name], check=False)
            redis.terminate()
            redis.wait(timeout=10)
    say("all checks passed")


SLOW_APP = """
import asyncio
from pathlib import Path

from horae import on_event

import example_app  # noqa: F401 - the example's listeners too


@on_event("deploy.slow")
async def slow(event):
    Path("/work/started").write_text(event.scheduled_job_id)
    await asyncio.sleep(float(event.payload["sleep"]))
    Path("/work/finished").write_text(event.scheduled_job_id)
"""


def check_worker(image: list[str], podman: list[str], redis_port: int, names: list[str]) -> None:
    """The example worker (plus a slow listener) serves its probes and metrics; SIGTERM while
    an attempt runs turns /readyz 503 at once, the attempt finishes, the worker exits 0."""
    health, metrics, name = free_port(), free_port(), f"horae-test-worker-{os.getpid()}"
    names.append(name)
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    with tempfile.TemporaryDirectory() as work:
        Path(work, "slow_app.py").write_text(SLOW_APP)
        os.chmod(work, 0o777)  # (the container's user 10001 writes its marks here)
        run(
            [
                *[a for a in image if a != "--rm"],
                "-d",
                "--name",
                name,
                "--network",
                "host",
                "-v",
                f"{ROOT / 'deploy' / 'example'}:/app:ro",
                "-v",
                f"{work}:/work",
                "-e",
                "PYTHONPATH=/app:/work",
                "-e",
                f"HORAE_REDIS_URL={redis_url}",
                "-e",
                "HORAE_AUDIT__ENABLED=false",
                IMAGE,
                "worker",
                "--app",
                "slow_app",
                "--health-port",
                str(health),
                "--metrics-port",
                str(metrics),
                "--grace",
                "20",
            ]
        )
        until(f"http://127.0.0.1:{health}/readyz", 200, 60, "the worker's readiness")
        if get(f"http://127.0.0.1:{health}/healthz")[0] != 200:
            fail("the worker's /healthz is not 200")
        status, text = get(f"http://127.0.0.1:{metrics}/metrics")
        if status != 200 or "horae_" not in str(text):
            fail(f"the worker's metrics port answered {status}")
        say("worker: /healthz 200, /readyz 200, metrics served")

        job_id = asyncio.run(_schedule_slow(redis_url, 5))
        deadline = time.monotonic() + 30
        while not Path(work, "started").exists():
            if time.monotonic() > deadline:
                fail("the slow attempt did not start in the container")
            time.sleep(0.1)
        stop = subprocess.Popen(
            [*podman, "stop", "-t", "30", name],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        body = until(
            f"http://127.0.0.1:{health}/readyz", 503, 3, "the worker's readiness after SIGTERM"
        )
        if not isinstance(body, dict) or body.get("reason") != "draining after SIGTERM":
            fail(f"unready for another reason: {body}")
        if Path(work, "finished").exists():
            fail("the attempt had finished before readiness turned 503")
        stop.wait(timeout=60)
        code = run([*podman, "inspect", name, "--format", "{{.State.ExitCode}}"]).stdout.strip()
        logs = run([*podman, "logs", name])
        if code != "0" or "worker stopped" not in logs.stdout + logs.stderr:
            fail(f"the SIGTERMed worker exited {code}:\n{logs.stdout}{logs.stderr}")
        finished = Path(work, "finished")
        if not finished.exists() or finished.read_text() != job_id:
            fail("the drain did not let the running attempt finish")
    say(
        "worker: SIGTERM turned /readyz 503 (draining after SIGTERM) while an attempt ran; "
        "it finished, the worker exited 0"
    )


async def _schedule_slow(redis_url: str, sleep_s: float) -> str:
    """Schedule one deploy.slow job from this (host) process, audit off."""
    from horae.settings import load_settings
    from scheduler import Scheduler

    settings = load_settings(env={}, redis_url=redis_url)
    settings = settings.model_copy(
        update={"audit": settings.audit.model_copy(update={"enabled": False})}
    )
    async with Scheduler(settings=settings) as s:
        return await s.schedule_in("deploy.slow", 0, payload={"sleep": sleep_s})


def check_console(image: list[str], podman: list[str], redis_port: int, names: list[str]) -> None:
    port, name = free_port(), f"horae-test-console-{os.getpid()}"
    names.append(name)
    run(
        [
            *[a for a in image if a != "--rm"],
            "-d",
            "--name",
            name,
            "--network",
            "host",
            "-e",
            f"HORAE_REDIS_URL=redis://127.0.0.1:{redis_port}/0",
            "-e",
            "HORAE_AUDIT__ENABLED=false",
            "-e",
            "HORAE_CONSOLE__OPERATOR_TOKEN=test-token",
            IMAGE,
            "console",
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
        ]
    )
    until(f"http://127.0.0.1:{port}/readyz", 200, 60, "the console's readiness")
    if get(f"http://127.0.0.1:{port}/healthz")[0] != 200:
        fail("the console's /healthz is not 200")
    if get(f"http://127.0.0.1:{port}/api/v1/stats")[0] != 401:
        fail("the console's API answered without a token")
    say("console: /healthz 200, /readyz 200 without a token; its API wants one")


if __name__ == "__main__":
    main()
