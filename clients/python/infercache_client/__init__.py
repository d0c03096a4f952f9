"""Light client for the infercache sidecar (grpcio + protobuf only)."""

from infercache_client.client import AsyncCacheClient, CacheClient, make_key, make_traits

__all__ = ["AsyncCacheClient", "CacheClient", "make_key", "make_traits"]
