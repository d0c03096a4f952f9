"""docs/keys.md and the key schema agree: each key field it names exists, each one is named."""

from __future__ import annotations

import re
from pathlib import Path

from google.protobuf.descriptor import Descriptor
from infercache.v1 import cache_pb2 as pb

DOC = Path(__file__).resolve().parents[2] / "docs" / "keys.md"
ROOT: Descriptor = pb.CacheKey.DESCRIPTOR  # type: ignore[assignment]
_CODE = re.compile(r"`([^`]+)`")


def key_field_cells() -> list[str]:
    """The "Key field" cell of every table row in docs/keys.md."""
    cells = []
    for line in DOC.read_text().splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cols) == 3 and cols[1] not in ("Key field", "---"):
            cells.append(cols[1])
    return cells


def named_paths() -> set[str]:
    """Key field paths the table names (`sampling.top_k`), `extra` included."""
    paths: set[str] = set()
    for cell in key_field_cells():
        if cell in ("excluded", "not cached"):
            continue
        found = _CODE.findall(cell)
        assert found, f"a key field cell names no field: {cell!r}"
        if cell.startswith("`extra`"):
            paths.add("extra")
            continue
        paths.update(found)
    return paths


Field = tuple[str, str]
"""(full name of the message, field name): MediaRef's fields are one set for every media kind."""


def resolve(path: str) -> Field | None:
    """The field a dotted path (`[]` for repeated) names in CacheKey's tree, or None."""
    descriptor: Descriptor | None = ROOT
    found: Field | None = None
    for part in path.replace("[]", "").split("."):
        if descriptor is None or part not in descriptor.fields_by_name:
            return None
        field = descriptor.fields_by_name[part]
        found = (descriptor.full_name, field.name)
        is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
        descriptor = None if is_map else field.message_type
    return found


def leaf_fields(descriptor: Descriptor, seen: set[str] | None = None) -> set[Field]:
    """Every scalar, repeated-scalar and map field of the message types under `descriptor`."""
    seen = set() if seen is None else seen
    seen.add(descriptor.full_name)
    out: set[Field] = set()
    for field in descriptor.fields:
        message = field.message_type
        if message is None or message.GetOptions().map_entry:
            out.add((descriptor.full_name, field.name))
        elif message.full_name not in seen:
            out |= leaf_fields(message, seen)
    return out


def test_every_key_field_in_the_table_exists_in_the_proto() -> None:
    """A path the gateway is told to fill must be a real CacheKey field."""
    missing = sorted(p for p in named_paths() if resolve(p) is None)
    assert not missing, f"docs/keys.md names fields CacheKey does not have: {missing}"


def test_every_key_field_of_the_proto_is_in_the_table() -> None:
    """A CacheKey field (of any message under it) the table never names is one no gateway
    would fill: adding a key field means adding its row."""
    named = {resolve(p) for p in named_paths()}
    unnamed = sorted(leaf_fields(ROOT) - named)
    assert not unnamed, f"CacheKey fields docs/keys.md does not map: {unnamed}"


def test_the_table_excludes_the_transport_and_accounting_fields() -> None:
    """stream, user, request ids and friends are listed, as excluded, with a reason."""
    rows = {
        line.split("|")[1].strip(): line
        for line in DOC.read_text().splitlines()
        if line.startswith("| `")
    }
    # priority was listed with request_id until 2026-12-02; it is keyed now (vLLM refuses
    # some values), see docs/keys.md.
    for name in ("`stream`", "`stream_options`", "`request_id`", "`service_tier`"):
        assert name in rows, name
        assert "| excluded |" in rows[name], rows[name]
