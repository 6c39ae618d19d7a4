"""`horae console` as users start it: a real process serving the pages and the API, and
its refusal to listen beyond loopback without a token."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx

from tests.procs import HORAE

ROOT = Path(__file__).resolve().parents[2]


def _env(redis_url: str, database_url: str, namespace: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "HORAE_REDIS_URL": redis_url,
        "HORAE_DATABASE_URL": database_url,
        "HORAE_NAMESPACE": namespace,
        **extra,
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_it_refuses_a_public_address_without_a_token(
    redis_url: str, database_url: str, namespace: str
) -> None:
    done = subprocess.run(
        [str(HORAE), "console", "--host", "0.0.0.0"],
        env=_env(redis_url, database_url, namespace),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode != 0
    assert (
        "console host '0.0.0.0' is not loopback" in done.stderr and "operator_token" in done.stderr
    )
    assert "Traceback" not in done.stderr


def test_it_serves_pages_and_the_api(redis_url: str, database_url: str, namespace: str) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [str(HORAE), "console", "--port", str(port)],
        env=_env(redis_url, database_url, namespace),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/api/v1/stats", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the console did not answer within 30 s"
            time.sleep(0.2)
        made = httpx.post(
            base + "/api/v1/jobs", json={"topic": "cli.console", "delay_s": 3600}
        ).json()
        page = httpx.get(base + f"/jobs/{made['job_id']}")
        assert page.status_code == 200 and "cli.console" in page.text
        assert page.headers["content-security-policy"].startswith("default-src 'none'")
        overview = httpx.get(base + "/")
        assert overview.status_code == 200 and 'data-topic="cli.console"' in overview.text
    finally:
        proc.terminate()
        proc.communicate(timeout=30)  # (reads and closes its pipes)


def test_it_refuses_trusted_proxies_without_a_token(
    redis_url: str, database_url: str, namespace: str
) -> None:
    """Behind a proxy no caller is the loopback client a console without tokens trusts."""
    done = subprocess.run(
        [str(HORAE), "console"],
        env=_env(redis_url, database_url, namespace, HORAE_CONSOLE__TRUSTED_PROXIES="10.0.0.5"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode != 0
    assert "console.trusted_proxies is ['10.0.0.5/32'] but no token is set" in done.stderr, (
        done.stderr
    )
    assert "Traceback" not in done.stderr
