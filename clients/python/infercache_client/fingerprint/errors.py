"""The one error fingerprinting raises on purpose."""

from __future__ import annotations


class FingerprintError(ValueError):
    """Bad input: no model directory, a malformed or lying safetensors header,
    an unreadable file, an inconsistent shard index, or a bad memo-file path.

    The message is one line and names the offending path.
    """
