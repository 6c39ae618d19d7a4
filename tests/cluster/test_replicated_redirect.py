"""durability="replicated" follows a MOVED too: a script call sent to a node that is now a replica
(the old master of a failover, back as its replica, while the wire's slot map still names it)
is answered MOVED, and the WAIT written after it errors ("WAIT cannot be used with replica
instances"). That WAIT error must not hide the redirection: nothing ran there, the call goes on
to the slot's master. (Seen as test_failover.py's replicated run failing for 20 s to schedule.)"""

from __future__ import annotations

from redis.exceptions import ResponseError

from scheduler.store.cluster import ClusterWire
from scheduler.store.pipe import Endpoint
from tests.cluster.servers import Node, RedisCluster

SCRIPT = "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])"


async def test_a_moved_reply_of_a_replica_is_followed_despite_the_wait_error(
    redis_cluster: RedisCluster, namespace: str
) -> None:
    key = "{" + namespace + "}:moved-from-a-replica"
    master = redis_cluster.owner_of(key)
    replica_port = next(
        n.port
        for n in redis_cluster.nodes
        if n.proc.poll() is None and _master_port(n) == master.port
    )
    wire = ClusterWire(
        [Endpoint(port=n.port) for n in redis_cluster.nodes], decode=True, replicas=1
    )
    try:
        sha = await wire.call("SCRIPT", "LOAD", SCRIPT)
        slot = wire._slots.slot(key)
        assert wire._slots.owner[slot] == ("127.0.0.1", master.port)
        wire._slots.owner[slot] = (
            "127.0.0.1",
            replica_port,
        )  # the map of a wire that missed a failover
        with redis_cluster.node(replica_port).client() as r:
            try:
                r.execute_command("WAIT", 1, 10)
                raise AssertionError("the premise: WAIT fails on a replica")
            except ResponseError as exc:
                assert "replica" in str(exc)

        assert await wire.evalsha(sha, SCRIPT, [key], ["ran"]) == "ran"
        assert wire._slots.owner[slot] == ("127.0.0.1", master.port), (
            "the MOVED reply updated the map"
        )
    finally:
        await wire.aclose()


def _master_port(node: Node) -> int | None:
    """The port of the node's master (None: it is a master)."""
    with node.client() as c:
        port = c.info("replication").get("master_port")
    return int(port) if port is not None else None
