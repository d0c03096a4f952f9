"""The constants of infercache's KV events, shared by the connector and the sidecar.

The connector publishes the pool's blocks through vLLM's stream (events.py); the
sidecar's own publisher (sidecar/events) publishes the pool's and the warm tier's.
Both name a tier with these values, so a router reads one vocabulary. Pure: no vLLM.
"""

from __future__ import annotations

SCHEMA = "infercache.kv.event.v1"
"""The `schema` entry of every block's extra_keys."""
POOL_MEDIUM = "CPU"
"""The sidecar's pool: host memory on this pod's node, vLLM's word for it."""
WARM_MEDIUM = "STORAGE"
"""The fleet's warm tier (Redis): a network fetch away."""
POOL_OWNER = "infercache-pool"
WARM_OWNER = "infercache-warm"
"""`ownership`: which infercache tier an event is about (vLLM: the offloading tier)."""
POOL_LOCALITY = "LOCAL"
WARM_LOCALITY = "REMOTE"
"""`locality`, relative to the publishing pod."""


def layout_label(
    num_layers: int, num_kv_heads: int, head_dim: int, tokens_per_block: int, dtype: str
) -> str:
    """The `layout` entry of extra_keys: a short readable name of a KV layout, e.g.
    `28x8x128/16/bfloat16` (the `scope` entry covers all of the layout exactly)."""
    return f"{num_layers}x{num_kv_heads}x{head_dim}/{tokens_per_block}/{dtype}"
