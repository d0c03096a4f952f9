"""KV hot tier: a slot pool shared with the model process, version-bound prefix lookups."""
