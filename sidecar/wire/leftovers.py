"""What a request's messages carry without a key field of their own (unknown message
fields, part types, block keys), keyed together as one digest in `extra`: every API's
message reader collects them the same way, so two requests that differ only there never
share a key."""

from __future__ import annotations

import hashlib
import json
from collections.abc import MutableMapping

Where = tuple[int | str, ...]
"""Where a leftover was found: the item's index and the path within it."""
Leftovers = dict[Where, str]
"""Each leftover's place -> its value as an `extra` entry."""


def key_leftovers(left: Leftovers, extra: MutableMapping[str, str], name: str) -> None:
    """Key `left` (when any) as `extra[name]`: the SHA-256 of its places and values."""
    if left:
        listed = json.dumps([[list(where), value] for where, value in left.items()])
        extra[name] = "sha256:" + hashlib.sha256(listed.encode()).hexdigest()
