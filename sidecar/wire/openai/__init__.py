"""The OpenAI wire format (chat completions, completions, embeddings), as vLLM reads it."""
