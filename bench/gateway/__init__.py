"""bench.gateway: infercache's OpenAI-compatible gateway against LiteLLM's proxy (see
__main__)."""
