"""The golden key vectors the TypeScript client is checked against are fresh: regenerating
them (every vector built by make_key and digested as the sidecar does, every refusal refused
by make_key) writes the committed file byte for byte."""

from __future__ import annotations

import json

from tests.support.key_vectors import PATH, render


def test_key_vectors_file_is_fresh() -> None:
    fresh = render()
    assert PATH.read_text(encoding="utf-8") == fresh, "stale: run `make key-vectors`"
    data = json.loads(fresh)
    assert len(data["vectors"]) >= 100
    assert len(data["refusals"]) >= 50
