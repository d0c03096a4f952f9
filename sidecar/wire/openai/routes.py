"""The OpenAI API's paths, and the forms an answer is stored in."""

from __future__ import annotations

from enum import Enum

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
EMBEDDINGS_PATH = "/v1/embeddings"


class AnswerForm(Enum):
    """How a record's answer is stored: the form the gateway's clients read back."""

    JSON = "json"
    """The upstream's whole OpenAI JSON body, as received (the gateway, not streamed)."""
    SSE = "sse"
    """The upstream's SSE events, one chunk each, [DONE] left out (the gateway, streamed)."""
