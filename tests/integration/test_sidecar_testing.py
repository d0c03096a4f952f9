"""sidecar.testing, the public test helpers: what the README promises downstream users."""

from __future__ import annotations

import subprocess
import sys

import pytest
from infercache.v1 import cache_pb2 as pb

from sidecar.errors import TierUnavailable
from sidecar.testing import T0_MS, Clock, FlakyWarmTier, in_process_sidecar
from tests.support.keys import cache_key, key
from tests.support.processes import REPO


def test_importing_it_needs_no_test_framework() -> None:
    """`import sidecar.testing` loads neither pytest nor hypothesis."""
    probe = (
        "import sys, sidecar.testing; print(sorted({'pytest', 'hypothesis'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


async def test_in_process_sidecar_serves_its_client_and_opens_nothing_else() -> None:
    """A stored result is a hit; no admin plane, no /metrics; store() insists on a MISS."""
    async with in_process_sidecar(default_ttl_s=60) as sc:
        stored = await sc.store(key("readme"), b"answer")
        assert (stored.outcome, stored.ttl_seconds) == (pb.STORE_OUTCOME_STORED, 60)
        hit = await sc.client.lookup(key("readme"))
        assert (hit.outcome, hit.payload) == (pb.LOOKUP_OUTCOME_HIT, b"answer")
        assert sc.stats.total("lookups", outcome="hit") == 1
        assert (sc.running.admin_ports, sc.running.metrics_port) == ([], None)
        assert sc.target == f"127.0.0.1:{sc.running.ports[0]}"
        with pytest.raises(AssertionError, match="expected a MISS"):
            await sc.store(key("readme"), b"again")  # a HIT: nothing to store under


async def test_flaky_warm_tier_fails_only_while_down() -> None:
    """Every call raises TierUnavailable while down; reads are counted; it recovers."""
    clock = Clock()
    assert clock() == T0_MS
    clock.advance(1.5)
    assert clock() == T0_MS + 1500
    warm = FlakyWarmTier(clock)
    digest = cache_key().digest
    assert await warm.get_many([digest]) == [None]
    warm.down = True
    with pytest.raises(TierUnavailable):
        await warm.get_many([digest])
    with pytest.raises(TierUnavailable):
        await warm.ping()
    warm.down = False
    await warm.ping()
    assert await warm.get_many([digest]) == [None]
    assert warm.reads == 2
    await warm.close()
