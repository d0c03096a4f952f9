"""A Messages answer's `usage` as a hit reports it (docs/gateway.md, "Usage on a hit").

Anthropic counts a prompt in three parts: `input_tokens` (computed, not read from or
written to a prompt cache), `cache_creation_input_tokens` and `cache_read_input_tokens`;
the whole prompt is their sum (vLLM computes its `input_tokens` the same way, as the
prompt minus the cached tokens). On a hit the model server computed nothing, so the
whole prompt is reported as read from cache: `cache_read_input_tokens` = the stored
answer's whole prompt, `input_tokens` = 0, `cache_creation_input_tokens` = 0.
`output_tokens` stays the stored answer's count: the tokens the client receives.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PARTS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def _count(usage: Mapping[str, Any], name: str) -> int:
    value = usage.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def prompt_tokens(usage: Mapping[str, Any]) -> int:
    """The whole prompt a usage counts (its three input parts together)."""
    return sum(_count(usage, name) for name in PARTS)


def hit_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """`usage` as a hit reports it: the whole prompt read from cache, nothing computed."""
    out = dict(usage)
    out["input_tokens"] = 0
    out["cache_creation_input_tokens"] = 0
    out["cache_read_input_tokens"] = prompt_tokens(usage)
    return out
