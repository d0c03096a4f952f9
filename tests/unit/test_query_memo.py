"""The data plane's query memo (sidecar/api/query_memo.py): a repeated LookupRequest is
answered from the memo only when its bytes are the very bytes that passed validation,
and never across a change of the pod's identity."""

from __future__ import annotations

import pytest
from infercache.v1 import cache_pb2 as pb

from sidecar.api.query_memo import QueryMemo
from sidecar.errors import InvalidArgument
from sidecar.identity.cell import IdentityCell
from sidecar.identity.pod import PodIdentity
from sidecar.identity.resolver import KeyResolver
from sidecar.key_types import KeyLimits
from tests.support.keys import key

OLD = PodIdentity("fp1-old", {})
NEW = PodIdentity("fp1-new", {})


def request(text: str = "hello") -> pb.LookupRequest:
    """A Lookup whose key leaves the model version to the pod (the resolver fills it)."""
    return pb.LookupRequest(key=key(text, model_version=""), max_age_seconds=30)


def with_unknown_field(req: pb.LookupRequest) -> pb.LookupRequest:
    """The same request plus field 999 (varint 1), which no sidecar knows."""
    parsed = pb.LookupRequest()
    parsed.ParseFromString(req.SerializeToString() + b"\xb8\x3e\x01")
    return parsed


def test_a_known_request_with_an_unknown_field_added_is_still_refused() -> None:
    """The memo holds the valid request; its copy carrying field 999 is refused, every
    time (unknown fields are part of the bytes: never a memo hit)."""
    memo = QueryMemo(KeyResolver(OLD, KeyLimits()))
    valid = request()
    first = memo.query(valid)
    assert memo.query(valid) is first  # memoised
    for _ in range(2):
        with pytest.raises(InvalidArgument, match="999"):
            memo.query(with_unknown_field(valid))
    assert memo.query(valid) is first


def test_an_identity_swap_empties_the_memo() -> None:
    """After the pod's weights change, the same bytes resolve under the new fingerprint:
    another digest, not the memoised query of the old identity."""
    cell = IdentityCell(OLD)
    memo = QueryMemo(KeyResolver(cell, KeyLimits()))
    req = request()
    before = memo.query(req)
    assert before.key.model_version == "fp1-old"
    cell.swap(NEW)
    after = memo.query(req)
    assert after.key.model_version == "fp1-new"
    assert after.key.digest != before.key.digest


def test_requests_that_differ_in_any_field_get_their_own_query() -> None:
    """Another bound, wait or text is another entry (bytes differ), never a shared one."""
    memo = QueryMemo(KeyResolver(OLD, KeyLimits()))
    base = memo.query(request())
    other_text = memo.query(request("other"))
    bound = pb.LookupRequest(key=key(model_version=""), max_age_seconds=31)
    assert other_text.key.digest != base.key.digest
    assert memo.query(bound).max_age_s == 31
    assert base.max_age_s == 30
