"""Strict safetensors header validation: malformed or lying headers are refused."""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from infercache_client.fingerprint import FingerprintError, Mode, fingerprint
from infercache_client.fingerprint.safetensors_header import read_header
from safetensors.numpy import save_file

from tests.support.checkpoints import llama_tensors, write_model, write_raw_safetensors

MODES: tuple[Mode, ...] = ("fast", "full")


def _header(path: Path) -> tuple[Any, ...]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_header(fd, os.fstat(fd).st_size, str(path)).tensors
    finally:
        os.close(fd)


def test_reference_writer_output_is_accepted(tmp_path: Path) -> None:
    """A file written by safetensors.numpy parses to the tensors it holds, in data order."""
    arrays: dict[str, np.ndarray] = {
        "b": np.zeros((2, 3), np.float16),
        "a": np.arange(5, dtype=np.int64),
    }
    path = tmp_path / "x.safetensors"
    save_file(arrays, str(path), metadata={"format": "pt"})
    entries = _header(path)
    assert {e.name: (e.dtype, e.shape, e.nbytes) for e in entries} == {
        "a": ("I64", (5,), 40),
        "b": ("F16", (2, 3), 12),
    }
    assert [e.start for e in entries] == sorted(e.start for e in entries)
    assert entries[-1].end == path.stat().st_size


def _t(dtype: str, shape: list[int], begin: int, end: int) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


OK = {"a": _t("F32", [2], 0, 8), "b": _t("U8", [4], 8, 12)}

# (id, header, data, expected message fragment)
MALFORMED: list[tuple[str, dict[str, Any] | bytes, bytes, str]] = [
    ("invalid_json", b'{"a": {"dtype": "F32",', b"", "not valid UTF-8 JSON"),
    ("not_utf8", b'{"\xff": 1}', b"", "not valid UTF-8 JSON"),
    ("not_an_object", b"[1, 2, 3]", b"", "not an object"),
    ("entry_not_object", {"a": 3}, b"", "entry is not an object"),
    ("unknown_dtype", {"a": _t("F31", [2], 0, 8)}, bytes(8), "unknown dtype"),
    ("negative_dim", {"a": _t("F32", [-2], 0, 8)}, bytes(8), "non-negative integers"),
    ("bool_dim", {"a": {**_t("F32", [2], 0, 8), "shape": [True]}}, bytes(8), "non-negative"),
    ("float_offset", {"a": {**_t("F32", [2], 0, 8), "data_offsets": [0, 8.0]}}, bytes(8), "[begin"),
    ("offsets_past_data", {"a": _t("F32", [2], 0, 8)}, bytes(4), "outside the 4-byte data region"),
    ("offsets_reversed", {"a": _t("F32", [0], 8, 0)}, bytes(8), "outside"),
    ("size_mismatch", {"a": _t("F32", [3], 0, 8)}, bytes(8), "needs 12"),
    ("overlap", {"a": _t("F32", [2], 0, 8), "b": _t("F32", [2], 4, 12)}, bytes(12), "overlaps"),
    ("gap", {"a": _t("F32", [1], 0, 4), "b": _t("F32", [1], 8, 12)}, bytes(12), "unclaimed"),
    ("trailing_bytes", OK, bytes(16), "cover 12 bytes of a 16-byte"),
    ("subbyte_fraction", {"a": _t("F4", [3], 0, 2)}, bytes(2), "whole number of bytes"),
    ("duplicate_name", b'{"a": {}, "a": {}}', b"", "duplicate key 'a'"),
    ("bad_metadata", {**OK, "__metadata__": {"format": 1}}, bytes(12), "__metadata__"),
]


@pytest.mark.parametrize(
    ("header", "data", "message"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_malformed_header_is_refused(
    tmp_path: Path, header: dict[str, Any] | bytes, data: bytes, message: str
) -> None:
    """Each kind of malformed or inconsistent header raises FingerprintError saying why."""
    path = write_raw_safetensors(tmp_path / "x.safetensors", header, data)
    with pytest.raises(FingerprintError, match=re.escape(message)):
        _header(path)


def test_well_formed_raw_header_is_accepted(tmp_path: Path) -> None:
    """The hand-written baseline used above (metadata, zero-size tensor) is itself valid."""
    header = {**OK, "empty": _t("BF16", [0, 7], 12, 12), "__metadata__": {"format": "pt"}}
    path = write_raw_safetensors(tmp_path / "x.safetensors", header, bytes(12))
    assert [e.name for e in _header(path)] == ["a", "b", "empty"]


@pytest.mark.parametrize("size", [0, 5])
def test_file_shorter_than_length_prefix_is_refused(tmp_path: Path, size: int) -> None:
    """A file too short to hold the 8-byte length prefix is refused."""
    path = tmp_path / "x.safetensors"
    path.write_bytes(bytes(size))
    with pytest.raises(FingerprintError, match="too short"):
        _header(path)


def test_header_length_beyond_file_is_refused(tmp_path: Path) -> None:
    """A length prefix larger than the rest of the file is refused before reading."""
    raw = json.dumps(OK).encode()
    path = write_raw_safetensors(tmp_path / "x.safetensors", raw, b"", header_len=len(raw) + 100)
    with pytest.raises(FingerprintError, match="runs past the end of the file"):
        _header(path)


def test_absurd_header_length_is_refused(tmp_path: Path) -> None:
    """A length prefix above the 100 MB cap is refused without allocating it."""
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", 2**63) + b"{}")
    with pytest.raises(FingerprintError, match="exceeds"):
        _header(path)


def test_truncated_shard_fails_the_whole_fingerprint(tmp_path: Path) -> None:
    """A shard cut short (e.g. an interrupted download) makes fingerprint() raise."""
    root = write_model(tmp_path / "m", llama_tensors(), shards=2)
    shard = next(root.glob("*.safetensors"))
    size = shard.stat().st_size
    os.truncate(shard, size - 100)
    for mode in MODES:
        with pytest.raises(FingerprintError, match="data region"):
            fingerprint(root, mode=mode)


def test_header_pointing_outside_file_fails_the_whole_fingerprint(tmp_path: Path) -> None:
    """A shard whose header claims bytes beyond the file makes fingerprint() raise."""
    root = write_model(tmp_path / "m", {"w": np.zeros(4, np.float32)}, tokenizer=False)
    write_raw_safetensors(root / "model.safetensors", {"w": _t("F32", [4], 0, 16)}, bytes(8))
    with pytest.raises(FingerprintError, match=r"model\.safetensors.*outside"):
        fingerprint(root)


_T = '{"dtype":"U8","shape":[2],"data_offsets":[0,2]}'


@pytest.mark.parametrize(
    "text",
    [
        '{"__metadata__":{"format":"pt"},"a":' + _T + "}",
        '{"a":' + _T + ',"a":' + _T + "}",
        '{"__metadata__":{"k":"x","k":"y"},"a":' + _T + "}",
        '{"__metadata__":{"k":1},"a":' + _T + "}",
        '{"__metadata__":null,"a":' + _T + "}",
        '{"a":{"dtype":"U8","dtype":"U8","shape":[2],"data_offsets":[0,2]}}',
        '{"a":{"shape":[2],"dtype":"U8","data_offsets":[0,2]}}',
        '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"x":{"y":1,"y":2}}}',
        '{"a":{"dtype":"U8","shape":[{"y":1,"y":2}],"data_offsets":[0,2]}}',
        '{"a":{"dtype":"U8","shape":[{"y":1}],"data_offsets":[0,2]}}',
        '{"a":{"dtype":"U9","shape":[2],"data_offsets":[0,2]},"b":{"x":1,"x":2}}',
        '{"a":{"dtype":"U8","shape":[true],"data_offsets":[0,2]}}',
        '[{"a":1}]',
    ],
)
def test_fast_header_parse_accepts_and_refuses_exactly_as_the_strict_one(text: str) -> None:
    """The tuple-of-pairs fast path only ever agrees with the duplicate-key-hook parser:
    same tensors, or the strict parser's own error."""
    from infercache_client.fingerprint import safetensors_header as sh

    raw = text.encode()
    try:
        strict: Any = sorted(sh._parse_strict(raw, 2, 8, "p"), key=lambda e: e.start)
    except FingerprintError as exc:
        strict = str(exc)
    try:
        got: Any = list(sh.parse_header_json(raw, 2, 8, "p"))
    except FingerprintError as exc:
        got = str(exc)
    assert got == strict
