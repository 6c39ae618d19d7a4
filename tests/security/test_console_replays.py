"""The probe's requests (issue 33) replayed against a real `horae console` process, byte for
byte as curl sent them: a DNS-rebound page scheduling, cancelling and listing jobs, a CSRF
token of the attacker's choosing, a form post without Origin, and a viewer's 100 MiB body
(the console's memory must not grow by it)."""

from __future__ import annotations

import base64
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from scheduler.ops.servers import free_port as _free_port
from tests.procs import HORAE

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20


@contextmanager
def console(
    redis_url: str, database_url: str, namespace: str, **env: str
) -> Iterator[tuple[str, int]]:
    """`horae console` on a free loopback port, answering; (base URL, pid). Stopped by its pid."""
    port = _free_port()
    proc = subprocess.Popen(
        [str(HORAE), "console", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "HORAE_REDIS_URL": redis_url,
            "HORAE_DATABASE_URL": database_url,
            "HORAE_NAMESPACE": namespace,
            **env,
        },
    )
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": "Bearer o-token"} if env else {}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + "/api/v1/stats", headers=headers, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the console did not answer within 30 s"
            time.sleep(0.2)
        yield base, proc.pid
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_a_dns_rebound_page_is_refused(redis_url: str, database_url: str, namespace: str) -> None:
    with console(redis_url, database_url, namespace) as (base, _):
        port = base.rsplit(":", 1)[1]
        rebound = {"Host": f"attacker.example:{port}", "Origin": f"http://attacker.example:{port}"}
        victim = httpx.post(
            base + "/api/v1/jobs",
            json={"topic": "fp.victim", "delay_s": 3600, "payload": {"card": "4242"}},
        ).json()["job_id"]
        made = httpx.post(
            base + "/api/v1/jobs",
            headers={**rebound, "Content-Type": "application/json"},
            content=b'{"topic":"fp.never","delay_s":3600,"job_id":"rebind-proof"}',
        )
        assert made.status_code == 421, made.text
        assert made.json()["error"]["code"] == "MISDIRECTED_REQUEST"
        cancel = httpx.post(base + f"/api/v1/jobs/{victim}/cancel", headers=rebound, json={})
        listing = httpx.get(base + "/api/v1/jobs", headers={"Host": f"attacker.example:{port}"})
        assert (cancel.status_code, listing.status_code) == (421, 421)
        assert "4242" not in listing.text
        assert httpx.get(base + "/api/v1/jobs/rebind-proof").status_code == 404
        assert httpx.get(base + f"/api/v1/jobs/{victim}").json()["state"] == "scheduled"


def test_csrf_tokens_of_the_attackers_choosing_and_posts_without_origin_are_refused(
    redis_url: str, database_url: str, namespace: str
) -> None:
    with console(redis_url, database_url, namespace) as (base, _):
        victim = httpx.post(
            base + "/api/v1/jobs", json={"topic": "fp.victim", "delay_s": 3600}
        ).json()["job_id"]
        chosen = httpx.post(
            base + f"/jobs/{victim}/cancel",
            data={"csrf": "attacker"},
            headers={"Cookie": "horae_csrf=attacker", "Origin": base},
        )
        assert chosen.status_code == 403 and "CSRF check failed" in chosen.text
        with httpx.Client(base_url=base) as browser:
            page = browser.get(f"/jobs/{victim}")
            token = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
            bare = browser.post(f"/jobs/{victim}/cancel", data={"csrf": token})
            assert bare.status_code == 403 and "without Origin or Referer" in bare.text
            assert httpx.get(base + f"/api/v1/jobs/{victim}").json()["state"] == "scheduled"
            mine = browser.post(
                f"/jobs/{victim}/cancel", data={"csrf": token}, headers={"Origin": base}
            )
            assert mine.status_code == 303, mine.text
        assert httpx.get(base + f"/api/v1/jobs/{victim}").json()["state"] == "cancelled"


def _rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1))  # type: ignore[union-attr]


def test_a_viewers_100_mib_body_is_not_read(
    redis_url: str, database_url: str, namespace: str
) -> None:
    """Sent chunked (no Content-Length to refuse it by): the console answers 403 once it
    knows the caller, and the 100 MiB pass by without being kept (it grew by 100 MB)."""
    with console(
        redis_url,
        database_url,
        namespace,
        HORAE_CONSOLE__VIEWER_TOKEN="v-token",
        HORAE_CONSOLE__OPERATOR_TOKEN="o-token",
    ) as (base, pid):
        before = _rss_kib(pid)
        port = int(base.rsplit(":", 1)[1])
        auth = base64.b64encode(b"ann:v-token").decode()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(
                f"POST /api/v1/jobs HTTP/1.1\r\nHost: "
                f"127.0.0.1:{port}\r\nAuthorization: Basic {auth}\r\n"
                "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
            )

            def piece(data: bytes) -> bytes:
                return b"%x\r\n" % len(data) + data + b"\r\n"

            sock.sendall(
                piece(b'{"topic": "fp.never", "payload": "')
            )  # a valid job: only its size is wrong
            chunk = piece(b"x" * MiB)
            for _ in range(100):
                sock.sendall(chunk)
            sock.sendall(piece(b'"}') + b"0\r\n\r\n")
            answer = b""
            while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}}"):
                more = sock.recv(65536)
                assert more, answer
                answer += more
        assert answer.startswith(b"HTTP/1.1 403 "), answer[:200]
        assert b'"code":"FORBIDDEN"' in answer
        grown = _rss_kib(pid) - before
        assert grown < 16 * 1024, f"the console grew by {grown} KiB"
