"""Embedded warm tier behaviour beyond the shared contract suite."""

from __future__ import annotations

import pytest

from sidecar.config import ConfigError, load_config
from sidecar.errors import TierUnavailable
from sidecar.keys import KeyDigest
from sidecar.tiers.base import WarmItem
from sidecar.tiers.embedded import EmbeddedWarmTier


async def test_value_over_the_budget_is_refused_not_silently_dropped() -> None:
    """A value that can never fit raises TierUnavailable, so a Store reports WRITE_FAILED."""
    tier = EmbeddedWarmTier(max_bytes=1024, max_entries=10)
    digest = KeyDigest(b"\x01" * 32)
    with pytest.raises(TierUnavailable, match="exceeds its byte budget"):
        await tier.put_many([WarmItem(digest, b"x" * 2048, 60_000)])
    assert await tier.get_many([digest]) == [None]


def test_embedded_budget_smaller_than_one_payload_is_a_config_error() -> None:
    """Without Redis, an embedded budget that cannot hold a max-size entry stops the start."""
    with pytest.raises(ConfigError, match="INFERCACHE_EMBEDDED_MAX_BYTES"):
        load_config(
            {"INFERCACHE_EMBEDDED_MAX_BYTES": "1MiB", "INFERCACHE_MAX_PAYLOAD_BYTES": "1MiB"}
        )
    # With Redis the embedded tier is unused, so the same sizes are fine.
    load_config(
        {
            "INFERCACHE_EMBEDDED_MAX_BYTES": "1MiB",
            "INFERCACHE_MAX_PAYLOAD_BYTES": "1MiB",
            "INFERCACHE_REDIS_URL": "redis://127.0.0.1:1/0",
            "INFERCACHE_INSECURE_DEV_NO_FLEET_SECRET": "true",
        }
    )
