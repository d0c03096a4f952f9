"""Test support for the KV hot tier: a tiny causal transformer and a model-side worker."""
