"""bench.connector: the vLLM connector's time to first token (see __main__)."""
