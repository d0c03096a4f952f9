"""Protobuf -> domain translation: any wire input yields a key or a named INVALID_ARGUMENT."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from infercache.v1 import cache_pb2 as pb

from sidecar.api.cache_codec import key_request_from_pb
from sidecar.errors import InvalidArgument
from sidecar.keys import build_key
from tests.support.strategies.wire import wire_keys


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(wire_keys())
def test_any_wire_key_builds_or_is_invalid_argument(k: pb.CacheKey) -> None:
    """No CacheKey a client can send makes key building fail with anything but InvalidArgument."""
    field = ""
    try:
        key = build_key(key_request_from_pb(k))
    except InvalidArgument as exc:
        field = exc.field
    else:
        assert len(key.digest) == 32
    assert field == "" or field.startswith("key."), field


def test_absent_and_empty_sampling_agree() -> None:
    """An absent SamplingParams and an empty one carry no field either way: one digest."""
    base = pb.CacheKey(tenant="t", model_version="m", prompt_version="p", text="x")
    empty = pb.CacheKey()
    empty.CopyFrom(base)
    empty.sampling.SetInParent()
    assert (
        build_key(key_request_from_pb(base)).digest == build_key(key_request_from_pb(empty)).digest
    )


EXPLICIT_DEFAULTS = [
    {"temperature": 1.0},
    {"top_p": 1.0},
    {"top_k": -1},
    {"top_k": 0},
    {"n": 1},
    {"ignore_eos": False},
    {"max_tokens": 0},
    {"repetition_penalty": 1.0},
    {"presence_penalty": 0.0},
    {"min_p": 0.0},
    {"min_tokens": 0},
    {"skip_special_tokens": True},
    {"include_stop_str_in_output": False},
    {"response_format": pb.ResponseFormat(type=pb.RESPONSE_FORMAT_TYPE_TEXT)},
    {"response_format": pb.ResponseFormat()},
]


@pytest.mark.parametrize("fields", EXPLICIT_DEFAULTS, ids=lambda f: "-".join(map(str, f.items())))
def test_an_explicit_default_is_not_unset(fields: dict[str, object]) -> None:
    """Unset is not a default: vLLM fills unset fields from the model's generation config,
    so sending a default explicitly is a different request (schema v1 merged them)."""
    base = pb.CacheKey(tenant="t", model_version="m", prompt_version="p", text="x")
    explicit = pb.CacheKey()
    explicit.CopyFrom(base)
    explicit.sampling.CopyFrom(pb.SamplingParams(**fields))  # type: ignore[arg-type]
    a = build_key(key_request_from_pb(base)).digest
    assert a != build_key(key_request_from_pb(explicit)).digest


def test_unknown_response_format_type_is_invalid_argument() -> None:
    """A response format type this server does not know is INVALID_ARGUMENT, not a crash."""
    k = pb.CacheKey(tenant="t", model_version="m", prompt_version="p", text="x")
    k.sampling.response_format.type = 42  # type: ignore[assignment]
    with pytest.raises(InvalidArgument) as err:
        build_key(key_request_from_pb(k))
    assert err.value.field == "key.sampling.response_format.type"
