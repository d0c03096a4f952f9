"""Moved to tests.support (model_server, processes); kept until every importer has moved."""

from tests.support.model_server import answer_for, chat_prompt, token_prompt
from tests.support.processes import ModelServerProcess

__all__ = ["ModelServerProcess", "answer_for", "chat_prompt", "token_prompt"]
