"""vLLM KV connector for the infercache sidecar (needs the `vllm` extra and vLLM).

One flag enables it:

    --kv-transfer-config '{"kv_connector": "InfercacheConnector",
        "kv_connector_module_path": "infercache_client.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"sidecar": "127.0.0.1:50051"}}'

See docs/vllm.md for what it guarantees and its settings (connector.py, config.py).
"""

from infercache_client.vllm.connector import InfercacheConnector

__all__ = ["InfercacheConnector"]
