"""The pure parts of running on a Redis Cluster: the URL, the routing key of a command,
redirection replies, slot lookup, partition placement and the worker's partition subset."""

from __future__ import annotations

from typing import Any

import pytest
from redis.crc import key_slot
from redis.exceptions import ResponseError

from horae.settings import load_settings
from scheduler.core.errors import ConfigError
from scheduler.core.keys import Keys
from scheduler.store.cluster import _redirect, _Slots, first_key
from scheduler.store.cluster_url import (
    is_cluster_url,
    parse_cluster_url,
    url_partitions,
    with_url_layout,
)
from scheduler.store.listing import Cursor, partition_token
from scheduler.store.partitions import job_routing, parse_subset, partition_of


def test_cluster_urls_give_seed_nodes_credentials_and_partitions() -> None:
    url = "redis+cluster://user:p%40ss@10.0.0.1:7000,10.0.0.2:7001/0?partitions=12"
    address = parse_cluster_url(url)
    assert address.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7001))
    assert (address.username, address.password) == ("user", "p@ss")
    assert "p@ss" not in repr(address)
    assert is_cluster_url(url) and not is_cluster_url("redis://h:1/0") and not is_cluster_url(None)
    assert url_partitions(url) == 12 and url_partitions("redis+cluster://h:1") is None
    assert (
        url_partitions("redis://h:1?partitions=3") is None
    )  # only the cluster scheme carries a layout


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+cluster://h", "node 'h': each node must be host:port"),
        ("redis+cluster://h:1,h:99999", "node 'h:99999'"),
        (
            "rediss+cluster://h:1?ssl_ca_cert=/ca.pem",
            "option 'ssl_ca_cert': a cluster URL takes partitions=N and",
        ),
        (
            "redis+cluster://h:1?ssl_ca_certs=/ca.pem",
            "option 'ssl_ca_certs' is a TLS option: use rediss\\+cluster://",
        ),
        (
            "rediss+cluster://h:1?ssl_cert_reqs=maybe",
            "ssl_cert_reqs='maybe': must be one of none, optional, required",
        ),
        (
            "rediss+cluster://h:1?ssl_check_hostname=perhaps",
            "ssl_check_hostname='perhaps': must be true or false",
        ),
        (
            "unix+cluster://h:1",
            "scheme 'unix\\+cluster': a cluster needs redis\\+cluster://.* rediss\\+cluster://",
        ),
    ],
)
def test_bad_cluster_urls_name_the_part(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_cluster_url(url)


def test_rediss_cluster_urls_carry_the_standalone_tls_options_to_every_node() -> None:
    url = (
        "rediss+cluster://u:pw@10.0.0.1:7000,10.0.0.2:7000?partitions=3&ssl_ca_certs=/etc/ca.pem"
        "&ssl_certfile=/etc/c.pem&ssl_keyfile=/etc/c.key&ssl_check_hostname=false&ssl_cert_reqs=Required"
    )
    address = parse_cluster_url(url)
    assert is_cluster_url(url) and url_partitions(url) == 3
    assert address.tls and address.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7000))
    assert address.client_kwargs() == {
        "username": "u",
        "password": "pw",
        "ssl": True,
        "ssl_ca_certs": "/etc/ca.pem",
        "ssl_certfile": "/etc/c.pem",
        "ssl_keyfile": "/etc/c.key",
        "ssl_check_hostname": False,
        "ssl_cert_reqs": "required",
    }
    assert not parse_cluster_url("redis+cluster://h:1?partitions=2").tls
    assert parse_cluster_url("rediss://h:1/0").client_kwargs() == {
        "username": None,
        "password": None,
        "ssl": True,
    }


async def test_the_wire_of_a_tls_cluster_client_verifies_every_node_as_redis_py_does() -> None:
    import ssl

    from scheduler.store.clients import redis_client
    from scheduler.store.cluster import make_wire

    client: Any = redis_client("rediss+cluster://h1:7000,h2:7001")
    wire = make_wire(client)
    context = wire.endpoint.ssl
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    found = wire._endpoint(("h3", 7002))  # a node learnt later (CLUSTER SLOTS, MOVED, ASK)
    assert (found.host, found.port, found.ssl) == ("h3", 7002, context)
    plain: Any = redis_client("redis+cluster://h1:7000")
    assert make_wire(plain).endpoint.ssl is None
    await client.aclose()
    await plain.aclose()


def test_cluster_nodes_lines_become_node_views() -> None:
    from scheduler.ops.cluster_status import parse_nodes

    text = (
        "a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n"
        "b2 127.0.0.1:7001@17001,redis-b.example master,fail - 0 0 2 disconnected "
        "5461-10922 [10923->-c3]\nc3 :7002@17002 slave a1 0 0 1 connected\n"
    )
    a, b, c = parse_nodes(text, "seed.example")
    assert (a.address, a.host, a.master, a.slots) == (
        "127.0.0.1:7000",
        "127.0.0.1",
        True,
        [(0, 5460)],
    )
    assert (b.host, b.slots, "fail" in b.flags) == ("redis-b.example", [(5461, 10922)], True)
    assert (c.address, c.master, c.slots) == ("seed.example:7002", False, [])
    b.probe = "unreachable (ConnectionError: refused)"
    assert b.describe() == (
        "redis node 127.0.0.1:7001: master, slots 5461-10922, "
        "unreachable (ConnectionError: refused), the cluster marks it fail"
    )


def test_the_url_partitions_and_the_setting_must_agree() -> None:
    s = load_settings(path=None, env={}, redis_url="redis+cluster://h:1?partitions=6")
    assert s.cluster.partitions == 6
    with pytest.raises(ConfigError, match="partitions=6 but \\[cluster\\] partitions=3"):
        with_url_layout(
            s.model_copy(update={"cluster": s.cluster.model_copy(update={"partitions": 3})})
        )
    with pytest.raises(ConfigError, match="partitions='0'"):
        url_partitions("redis+cluster://h:1?partitions=0")


def test_commands_route_by_their_first_key() -> None:
    assert first_key(("EVALSHA", "sha", 2, "{ns|3}:due", "{ns|3}:active", "x")) == "{ns|3}:due"
    assert first_key(("EVALSHA", "sha", 0)) is None
    assert (
        first_key(
            (
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "COUNT",
                5,
                "BLOCK",
                10,
                "STREAMS",
                "{ns}:outbox",
                ">",
            )
        )
        == "{ns}:outbox"
    )
    assert first_key(("XINFO", "GROUPS", "{ns}:outbox")) == "{ns}:outbox"
    assert first_key(("XGROUP", "CREATE", "{ns}:outbox", "audit", "0")) == "{ns}:outbox"
    assert first_key(("HGETALL", "{ns}:j:1")) == "{ns}:j:1"
    assert first_key(("TIME",)) is None and first_key(("SCRIPT", "LOAD", "return 1")) is None


def test_a_key_slot_is_its_hash_tag_slot() -> None:
    slots = _Slots()
    for key in ("{ns}:due", "{ns|5}:j:abc", "plain", b"{ns}:outbox", "{}:empty-tag"):
        raw = key if isinstance(key, bytes) else key.encode()
        assert slots.slot(key) == key_slot(raw)
    slots.load(
        [
            [0, 8191, ["", 7000, "id1"], ["127.0.0.1", 7003, "id4"]],
            [8192, 16383, ["127.0.0.1", 7001, "id2"]],
        ],
        "10.0.0.9",
    )
    assert slots.owner[0] == ("10.0.0.9", 7000) and slots.owner[16383] == ("127.0.0.1", 7001)
    assert slots.masters == [("10.0.0.9", 7000), ("127.0.0.1", 7001)] and len(slots.nodes) == 3


def test_redirections_are_read_and_other_errors_left_alone() -> None:
    assert _redirect(ResponseError("MOVED 3999 127.0.0.1:7002")) == (
        "MOVED",
        3999,
        ("127.0.0.1", 7002),
    )
    assert _redirect(ResponseError("ASK 12 10.0.0.1:7000")) == ("ASK", 12, ("10.0.0.1", 7000))
    assert _redirect(ResponseError("TRYAGAIN multiple keys"))[0] == "BUSY"  # type: ignore[index]
    assert _redirect(ResponseError("CLUSTERDOWN The cluster is down"))[0] == "BUSY"  # type: ignore[index]
    assert _redirect(ResponseError("NOSCRIPT no such script")) is None and _redirect("OK") is None


def test_partition_keys_and_placement() -> None:
    assert Keys("ns").prefix == "{ns}:" and Keys("ns", 4).prefix == "{ns|4}:"
    assert Keys("ns", 4).meta == Keys("ns").meta == "{ns}:meta"
    assert partition_of("anything", 1) == 0
    assert {partition_of(f"id{i}", 6) for i in range(200)} == set(range(6))
    assert partition_of("k", 6) == partition_of("k", 6)  # stable: CRC32, not the salted hash()
    assert job_routing("id", "key", "dd") == "key" and job_routing("id", "", "dd") == "dd"
    assert job_routing("id") == "id"


def test_a_worker_partition_subset() -> None:
    assert parse_subset("", 4) == (0, 1, 2, 3)
    assert parse_subset("0-2, 5", 6) == (0, 1, 2, 5)
    with pytest.raises(ConfigError, match="'7' is outside 0..5"):
        parse_subset("1,7", 6)
    with pytest.raises(ConfigError, match="give partition numbers"):
        parse_subset("a-b", 6)


def test_a_partitioned_listing_cursor_survives_encoding() -> None:
    assert partition_token("3|due") == (3, "due") and partition_token("due") == (None, "due")
    for cursor in (Cursor("2|completed", "1700000000000", "abc"), Cursor("4|", "", "")):
        assert Cursor.decode(cursor.encode()) == cursor
