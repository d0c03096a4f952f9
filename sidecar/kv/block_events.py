"""What the KV hot tier tells a KV event publisher (sidecar/events): the blocks it holds.

The pool reports each block published under a key and each key it forgets (evicted,
unpublished after a weight change, dropped as altered); the warm tier's mover reports
the blocks it demoted (and for how long the warm tier keeps them) and the versions whose
warm values it dropped; lookups and commits name each request scope they use (what its
blocks' events carry in extra_keys). Called on the event loop, synchronously, on hot
paths: an implementation only records (no I/O).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Protocol

from sidecar.kv.layout import BlockKey, KvLayout


class BlockEvents(Protocol):
    """Receives the hot tier's block changes (see the module docstring)."""

    def version(self, version: str, fingerprint: str, block_size: int) -> None:
        """`version` (a version tag) names the weights `fingerprint`; its blocks hold
        `block_size` tokens (the attachment that made it current)."""

    def scope(
        self, prefix: bytes, scope: bytes, layout: KvLayout, tenant: str, cache_salt: str
    ) -> None:
        """Blocks under the request scope `prefix` (the first SCOPE_BYTES of their keys)
        are of version scope `scope` (an attachment's), `layout`, `tenant`, `cache_salt`.
        Called for every lookup and commit: an implementation remembers the first."""

    def pool_stored(self, key: BlockKey, version: Hashable) -> None:
        """A block was published in the pool under `key`."""

    def pool_removed(self, key: BlockKey) -> None:
        """The pool no longer holds the block published under `key`."""

    def warm_stored(self, keys: Sequence[BlockKey], version: str, ttl_ms: int) -> None:
        """This sidecar wrote these blocks of `version` to the warm tier (demotion), which
        keeps them `ttl_ms` from now unless written again."""

    def warm_dropped(self, version: str) -> None:
        """Every warm value of `version` was deleted."""
