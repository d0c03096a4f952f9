"""vLLM KV connector for the infercache sidecar (needs the `vllm` extra and vLLM).

One flag enables it:

    --kv-transfer-config '{"kv_connector": "InfercacheConnector",
        "kv_connector_module_path": "infercache_client.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"sidecar": "127.0.0.1:50051"}}'

See docs/vllm.md for what it guarantees and its settings (connector.py, config.py).
InfercacheConnector is imported on first access, so the modules that do not need
vLLM (config, chain, paged, link) import without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infercache_client.vllm.connector import InfercacheConnector

__all__ = ["InfercacheConnector"]


def __getattr__(name: str) -> Any:
    if name == "InfercacheConnector":
        from infercache_client.vllm.connector import InfercacheConnector

        return InfercacheConnector
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
