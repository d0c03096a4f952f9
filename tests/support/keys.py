"""The test key: one factory, one set of defaults, on the wire and as the sidecar builds it.

Defaults: tenant acme, model m1, prompt p1, text "hello", greedy (temperature 0, so
that no policy's deterministic_only bypasses it); `temperature=None` leaves it unset
(which the sidecar reads as 1.0, a sampled request).
"""

from __future__ import annotations

from typing import Any

from infercache.v1 import cache_pb2 as pb
from infercache_client import make_key

from sidecar.keys import CacheKey, InputKind, KeyRequest, Sampling, build_key

TENANT = "acme"
MODEL = "m1"
PROMPT = "p1"
TEXT = "hello"


def key(text: str = TEXT, *, temperature: float | None = 0.0, **dims: Any) -> pb.CacheKey:
    """A wire CacheKey for `text`; `dims` replace the defaults or add make_key arguments
    (adapter_version, extra, tools, sampling fields)."""
    fields: dict[str, Any] = {"tenant": TENANT, "model_version": MODEL, "prompt_version": PROMPT}
    if temperature is not None:
        fields["temperature"] = temperature
    return make_key(text=text, **(fields | dims))


def cache_key(
    text: str = TEXT,
    tenant: str = TENANT,
    *,
    model_version: str = MODEL,
    prompt_version: str = PROMPT,
    temperature: float | None = 0.0,
    seed: int | None = None,
) -> CacheKey:
    """The same key built below the API (sidecar.keys.build_key), for unit tests."""
    sampling = Sampling(temperature=temperature, seed=seed)
    return build_key(
        KeyRequest(tenant, model_version, prompt_version, text, InputKind.TEXT, sampling=sampling)
    )
