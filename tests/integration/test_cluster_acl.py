"""The documented minimal ACL on a Redis Cluster (issue 18 item 3 with item 1): a sidecar
whose user has exactly the ACL docs/deploy.md prints for a cluster stores, looks up (one
key and a batch across slots), invalidates (the control slot's script and the sharded
announcement) and reclaims, and no node logs a denied command, key or channel."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from infercache.v1 import cache_pb2 as pb

from sidecar.invalidation.rules import Selector
from sidecar.testing import in_process_sidecar
from tests.support.cluster import RedisClusterProcesses, redis_cli
from tests.support.keys import key
from tests.support.processes import REPO

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

PASSWORD = "cluster-acl-password-3c9a"
SLOW = 30.0


def documented_cluster_acl() -> str:
    """The `user ...` line docs/deploy.md prints between its acl-cluster markers."""
    text = (REPO / "docs" / "deploy.md").read_text()
    block = re.search(r"<!-- acl-cluster:begin -->(.*?)<!-- acl-cluster:end -->", text, re.S)
    assert block, "docs/deploy.md lost its <!-- acl-cluster:begin --> ... :end --> block"
    lines = [ln.strip() for ln in block.group(1).splitlines() if ln.strip().startswith("user ")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def acl_cluster(redis_cluster: RedisClusterProcesses) -> Iterator[tuple[str, str]]:
    """The session's cluster with the documented user on every node (removed afterwards:
    other tests share the cluster); yields (user, sidecar URL with its password)."""
    words = documented_cluster_acl().replace(">PASSWORD", f">{PASSWORD}").split()
    user = words[1]
    for port in redis_cluster.ports:
        assert redis_cli(port, "ACL", "SETUSER", *words[1:]).strip() == "OK"
        redis_cli(port, "ACL", "LOG", "RESET")
    nodes = ",".join(f"127.0.0.1:{p}" for p in redis_cluster.ports)
    try:
        yield user, f"redis+cluster://{user}:{PASSWORD}@{nodes}"
    finally:
        for port in redis_cluster.ports:
            redis_cli(port, "ACL", "DELUSER", user)


async def test_every_path_works_on_a_cluster_under_the_documented_acl(
    acl_cluster: tuple[str, str], redis_cluster: RedisClusterProcesses
) -> None:
    _, url = acl_cluster
    settings = {
        "redis_url": url,
        "hot_max_entries": "0",  # every hit is a warm read
        "reclaim_keys_per_s": "100000",
        # First calls open an authenticated connection to each node: the production
        # deadlines (50 ms read) are not what is tested here.
        "lookup_timeout_ms": "3000",
        "write_timeout_ms": "3000",
    }
    async with in_process_sidecar(settings) as sc:
        app = sc.running.app
        keys = [key(f"over the cluster {i}") for i in range(12)]  # spread over slots
        for i, k in enumerate(keys):
            miss = await sc.client.lookup(k, timeout=SLOW)
            assert miss.outcome == pb.LOOKUP_OUTCOME_MISS
            done = await sc.client.store(k, b"answer %d" % i, lease=miss.lease, timeout=SLOW)
            assert done.outcome == pb.STORE_OUTCOME_STORED
        batch = await sc.client.lookup_batch([*keys, key("never stored")], timeout=SLOW)
        assert [r.payload for r in batch] == [b"answer %d" % i for i in range(12)] + [b""]
        record = await app.invalidator.invalidate(
            Selector(prompt_version=keys[0].prompt_version), "acl test", "test"
        )
        assert record.epoch > 0
        after = await sc.client.lookup(keys[0], timeout=SLOW)
        assert after.outcome == pb.LOOKUP_OUTCOME_MISS
        await app.reclaimer.run_pass()
        stats = app.cache.stats
        assert (stats.warm_read_failures, stats.warm_write_failures) == (0, 0)
        assert getattr(app.stores.warm, "foreign_keys", None) == 0
    denied = {p: redis_cli(p, "ACL", "LOG").strip() for p in redis_cluster.ports}
    assert all(not log for log in denied.values()), denied
