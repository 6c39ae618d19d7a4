"""`horae services status` for a Redis Cluster: the cluster's own view (CLUSTER INFO and CLUSTER
NODES from the first seed that answers), every node probed by us (a node the cluster still
counts can be down), and the namespace's partition count from `{ns}:meta`. Nothing is written."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.crc import key_slot

from scheduler.core.keys import Keys
from scheduler.store.clients import sync_client
from scheduler.store.cluster_url import ClusterAddress, parse_cluster_url
from scheduler.store.partitions import LEGACY_KEYS

PROBE_TIMEOUT_S = 3.0
SLOTS = 16384


@dataclass
class ClusterNodeView:
    """One line of CLUSTER NODES, and what our own PING to it said."""

    address: str  # ip:port as the cluster announces it
    host: str  # what we connect to: the announced host name when there is one, else the ip
    port: int
    flags: frozenset[str]
    slots: list[tuple[int, int]] = field(default_factory=list)
    probe: str = "not probed"

    @property
    def master(self) -> bool:
        return "master" in self.flags

    @property
    def up(self) -> bool:
        return self.probe == "reachable"

    def describe(self) -> str:
        role = "master" if self.master else "replica"
        ranges = ",".join(f"{a}-{b}" if a != b else str(a) for a, b in self.slots)
        seen = sorted(self.flags & {"fail", "fail?", "handshake", "noaddr"})
        parts = [role, f"slots {ranges}" if ranges else "no slots", self.probe]
        if seen:
            parts.append("the cluster marks it " + ",".join(seen))
        return f"redis node {self.address}: " + ", ".join(parts)


def _client(address: ClusterAddress, host: str, port: int) -> redis.Redis:
    """One node's client; no retries: a dead node is reported at once, not after redis-py's
    backoff."""
    return sync_client(
        address, node=(host, port), timeout_s=PROBE_TIMEOUT_S, retry=False, decode=True
    )


def _probe(address: ClusterAddress, host: str, port: int) -> str:
    """'reachable' when the node answers PING, else why not (as service_status.probe_redis says
    it)."""
    try:
        with _client(address, host, port) as client:
            client.ping()
    except (redis.AuthenticationError, redis.ResponseError) as exc:
        return f"answers, but refuses ({type(exc).__name__}: {exc})"
    except (redis.RedisError, OSError, ValueError) as exc:
        return f"unreachable ({type(exc).__name__}: {exc})"
    return "reachable"


def parse_nodes(text: str, seed_host: str) -> list[ClusterNodeView]:
    """CLUSTER NODES as views, masters first (an empty announced ip is the seed's host, as in
    CLUSTER SLOTS)."""
    nodes: list[ClusterNodeView] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        endpoint, _, hostname = fields[1].partition(",")
        hostport = endpoint.split("@", 1)[0]
        ip, _, port = hostport.rpartition(":")
        ip = ip or seed_host
        view = ClusterNodeView(
            f"{ip}:{port}", hostname or ip, int(port), frozenset(fields[2].split(","))
        )
        for item in fields[8:]:
            if item.startswith("["):  # a slot being migrated or imported: still its owner's
                continue
            low, _, high = item.partition("-")
            view.slots.append((int(low), int(high or low)))
        nodes.append(view)
    return sorted(nodes, key=lambda n: (not n.master, n.host, n.port))


def _cluster_view(address: ClusterAddress) -> tuple[dict[str, str], list[ClusterNodeView]]:
    """CLUSTER INFO and CLUSTER NODES of the first seed that answers.

    Raises:
        ConnectionError: no seed answered (the message names each seed and why).
    """
    errors: list[str] = []
    for host, port in address.nodes:
        try:
            with _client(address, host, port) as client:
                info_text: Any = client.execute_command("CLUSTER", "INFO")
                nodes_text: Any = client.execute_command("CLUSTER", "NODES")
        except (redis.RedisError, OSError, ValueError) as exc:
            errors.append(f"{host}:{port}: {type(exc).__name__}: {exc}")
            continue
        info = dict(line.split(":", 1) for line in str(info_text).splitlines() if ":" in line)
        return {k.strip(): v.strip() for k, v in info.items()}, parse_nodes(str(nodes_text), host)
    raise ConnectionError("; ".join(errors))


def _is_node(host: str, port: int, nodes: list[ClusterNodeView]) -> bool:
    """Whether a seed is one of the cluster's nodes (a seed may name by host name what the
    cluster announces by ip)."""
    try:
        names = {host, socket.gethostbyname(host)}
    except OSError:
        names = {host}
    return any(n.port == port and names & {n.host, n.address.rpartition(":")[0]} for n in nodes)


def _partitions(
    address: ClusterAddress, nodes: list[ClusterNodeView], namespace: str, configured: int
) -> str:
    """What `{ns}:meta` on its slot's master says of the namespace's partition count."""
    keys = Keys(namespace)
    slot = key_slot(keys.meta.encode())
    owner = next((n for n in nodes if n.master and any(a <= slot <= b for a, b in n.slots)), None)
    if owner is None or not owner.up:
        where = (
            f"its master {owner.address} is not reachable" if owner else "no master serves its slot"
        )
        return f"namespace {namespace!r}: partition count unknown ({where})"
    try:
        with _client(address, owner.host, owner.port) as client:
            stored = client.hget(keys.meta, "partitions")
            legacy = stored is None and any(client.exists(f"{keys.prefix}{k}") for k in LEGACY_KEYS)
    except (redis.RedisError, OSError) as exc:
        return f"namespace {namespace!r}: partition count unknown ({type(exc).__name__}: {exc})"
    if stored is None:
        if legacy:
            stored = "1"
        else:
            return (
                f"namespace {namespace!r}: no data yet (this process "
                f"is configured with {configured} partitions)"
            )
    text = f"namespace {namespace!r}: {stored} partition{'s' if str(stored) != '1' else ''}"
    if int(stored) != configured:
        text += f" (this process is configured with {configured}: it would be refused)"
    return text


def cluster_status_lines(url: str, namespace: str, configured_partitions: int) -> list[str]:
    """The cluster summary (the rest of the `redis: external URL:` line), then one line per node
    and per seed that is no node of the cluster; passwords are the caller's to hide."""
    address = parse_cluster_url(url)
    try:
        info, nodes = _cluster_view(address)
    except ConnectionError as exc:
        return [f"cluster unreachable (no seed node answered: {exc})"]
    for node in nodes:
        node.probe = _probe(address, node.host, node.port)
    strangers = {
        f"{h}:{p}": _probe(address, h, p) for h, p in address.nodes if not _is_node(h, p, nodes)
    }
    seeds = [
        f"redis seed {name}: {probe}, not a node of the cluster"
        for name, probe in strangers.items()
    ]
    masters = [n for n in nodes if n.master]
    replicas = [n for n in nodes if not n.master]
    covered = sum(b - a + 1 for n in masters if n.up for a, b in n.slots)
    summary = (
        f"cluster_state {info.get('cluster_state', '?')}, "
        f"{sum(n.up for n in masters)}/{len(masters)} masters up, "
        f"{sum(n.up for n in replicas)}/{len(replicas)} replicas up, "
        f"{covered}/{SLOTS} slots covered; "
        f"{_partitions(address, nodes, namespace, configured_partitions)}"
    )
    down = [n.address for n in nodes if not n.up] + [
        f"{name} (seed)" for name, probe in strangers.items() if probe != "reachable"
    ]
    if down:
        summary += "; not reachable: " + ", ".join(down)
    return [summary, *(n.describe() for n in nodes), *seeds]
