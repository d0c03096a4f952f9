"""What the connector declares when it attaches: the weights' fingerprint and KV layout.

The fingerprint is the one of the files vLLM loaded (its model directory) and the
serving options the operator declares (kv_connector_extra_config.serving_config),
computed by infercache_client.fingerprint.pod_fingerprint: the very call the sidecar
makes for its --model-path and INFERCACHE_SERVING_CONFIG, shipped in this
distribution (no server needed), never a model name. When the two differ (other
files, other serving options, a stale start) the attach is refused and the connector
serves no external KV at all rather than another model's.
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from infercache.v1 import kv_pb2 as PB2

from infercache_client.fingerprint import (
    FingerprintError,
    Mode,
    default_cache_file,
    fingerprint,
    pod_fingerprint,
)
from infercache_client.kv.pool import kv_layout
from infercache_client.vllm.config import ConfigError, ConnectorConfig


class FingerprintUnavailable(RuntimeError):
    """The loaded weights cannot be fingerprinted here."""


def _mode(config: ConnectorConfig) -> Mode:
    return "full" if config.fingerprint_mode == "full" else "fast"


def _cache_file(config: ConnectorConfig) -> str | None:
    # Full mode reads every byte: the memo (the sidecar's default file, keyed by each
    # shard's inode, size, mtime and ctime) spares an engine restart the rehash.
    if config.fingerprint_mode != "full":
        return None
    return config.fingerprint_cache_file or str(default_cache_file(os.environ))


def model_fingerprint(vllm_config: Any, config: ConnectorConfig) -> str:
    """The fingerprint to attach with: the configured one, else that of the model dir."""
    if config.model_fingerprint:
        return config.model_fingerprint
    model = str(vllm_config.model_config.model)
    if not os.path.isdir(model):
        raise FingerprintUnavailable(
            f"model {model!r} is not a local directory: its files cannot be fingerprinted; "
            "set kv_connector_extra_config.model_fingerprint"
        )
    try:
        fp = pod_fingerprint(
            model,
            mode=_mode(config),
            cache_file=_cache_file(config),
            serving_config=config.serving_config,
        )
    except (OSError, FingerprintError) as exc:
        raise FingerprintUnavailable(f"cannot fingerprint {model}: {exc}") from exc
    return fp.value


class AdapterFingerprints:
    """LoRA adapter fingerprints by path, computed once each (None if it cannot be)."""

    def __init__(self, config: ConnectorConfig) -> None:
        """Mode and memo as for the model (an adapter has no serving options, as in
        the sidecar's --adapter)."""
        self._mode = _mode(config)
        self._cache_file = _cache_file(config)
        self._by_path: dict[str, str | None] = {}

    def of(self, path: str) -> str | None:
        """The adapter directory's fingerprint; None when it cannot be computed."""
        if path not in self._by_path:
            try:
                fp = fingerprint(path, kind="adapter", mode=self._mode, cache_file=self._cache_file)
                self._by_path[path] = fp.value
            except (OSError, FingerprintError):
                self._by_path[path] = None
        return self._by_path[path]


_CACHE_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}


def kv_cache_dtype(vllm_config: Any) -> torch.dtype:
    """The dtype of vLLM's KV cache ("auto": the model's dtype)."""
    name = str(vllm_config.cache_config.cache_dtype)
    if name == "auto":
        dtype: torch.dtype = vllm_config.model_config.dtype
        return dtype
    if name not in _CACHE_DTYPES:
        raise ConfigError(f"KV cache dtype {name!r} is not supported by the infercache connector")
    return _CACHE_DTYPES[name]


def _rope_config(hf_config: Any) -> str:
    """The RoPE / context settings that shape K, canonically."""
    parts = {
        name: getattr(hf_config, name, None)
        for name in ("rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings")
    }
    return json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))


def layout_of(vllm_config: Any) -> PB2.KvLayout:
    """The KvLayout both halves attach with (the same in both: it is the blocks' scope)."""
    model, parallel = vllm_config.model_config, vllm_config.parallel_config
    if parallel.tensor_parallel_size != 1 or parallel.pipeline_parallel_size != 1:
        raise ConfigError(
            "the infercache connector supports tensor_parallel_size=1 and "
            "pipeline_parallel_size=1 only (each rank would need its own scope)"
        )
    cache = vllm_config.cache_config
    return kv_layout(
        num_layers=model.get_num_layers(parallel),
        num_kv_heads=model.get_num_kv_heads(parallel),
        head_dim=model.get_head_size(),
        tokens_per_block=cache.block_size,
        dtype=kv_cache_dtype(vllm_config),
        rope_config=_rope_config(model.hf_config),
        extra={"cache_dtype": str(cache.cache_dtype), "engine": "vllm"},
    )
