"""infercache sidecar: reuses LLM results only when everything that shaped them matches."""

__version__ = "0.1.0"
