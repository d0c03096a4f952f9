"""Quick sanity checks of key building (the full suite is in test_keys.py)."""

from sidecar.keys import InputKind, KeyRequest, build_key


def test_same_request_same_digest() -> None:
    """Two identical requests hash to the same 32-byte digest."""
    req = KeyRequest("t", "m", "p", input="hi", input_kind=InputKind.TEXT)
    assert build_key(req).digest == build_key(req).digest
    assert len(build_key(req).digest) == 32
