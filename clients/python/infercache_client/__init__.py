"""Light client for the infercache sidecar (grpcio + protobuf only)."""

from infercache_client.admin import AdminClient
from infercache_client.builders import replay_request
from infercache_client.client import AsyncCacheClient, CacheClient
from infercache_client.keys import make_key, make_traits
from infercache_client.streams import (
    CACHE_MARKER,
    AsyncLookupStream,
    AsyncStoreStream,
    LookupStream,
    StoreStream,
    join_chunks,
    make_pacing,
)

__all__ = [
    "CACHE_MARKER",
    "AdminClient",
    "AsyncCacheClient",
    "AsyncLookupStream",
    "AsyncStoreStream",
    "CacheClient",
    "LookupStream",
    "StoreStream",
    "join_chunks",
    "make_key",
    "make_pacing",
    "make_traits",
    "replay_request",
]
