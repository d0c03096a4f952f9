"""docs/keys.md's Responses table and wire/openai/responses.py agree: every field the code
knows is a row, in the column the code puts it, and every row names a field the code
knows (tests/unit/test_keys_doc.py checks the key fields against the proto)."""

from __future__ import annotations

import re
from pathlib import Path

from sidecar.wire.openai import responses

DOC = Path(__file__).resolve().parents[2] / "docs" / "keys.md"
_NAME = re.compile(r"`([a-z_]+)(?:`|[:\[ ])")


def rows() -> list[tuple[set[str], str]]:
    """(top-level body fields the row's first cell names, its key field cell) of each
    row of the Responses table."""
    text = DOC.read_text()
    start = text.index("## Responses (`POST /v1/responses`)")
    end = text.index("\n## ", start + 1)
    out = []
    for line in text[start:end].splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cols) != 3 or cols[1] in ("Key field", "---"):
            continue
        names = {n for n in _NAME.findall(cols[0]) if not cols[0].startswith("`input[")}
        out.append((names, cols[1]))
    return out


def names_where(test: str) -> set[str]:
    """The fields named in rows whose key field cell starts with `test`."""
    return {n for names, cell in rows() if cell.startswith(test) for n in names}


def test_every_field_the_code_knows_is_a_row() -> None:
    """A field the keyer knows but the table does not list is one nobody can check."""
    known = responses.KNOWN | responses.EXTRA_KNOWN | responses.EXCLUDED
    documented = {n for names, _ in rows() for n in names}
    assert sorted(known - documented) == []
    assert sorted(documented - known) == []


def test_each_field_is_in_the_column_the_code_puts_it() -> None:
    """Excluded fields are listed as excluded, stateful ones as not cached, sampling ones
    under `sampling.*`, the extra rule's under `extra`."""
    stateful = {name for name, _ in responses.STATEFUL} | {"background", "store"}
    for names, column in (
        (responses.EXCLUDED, "excluded"),
        (stateful, "not cached"),
        (set(responses.SAMPLING_FIELDS), "`sampling."),
        (responses.EXTRA_KNOWN - stateful, "`extra`"),
        ({"tools", "tool_choice"}, "`tool"),
        ({"parallel_tool_calls"}, "`parallel_tool_calls`"),
    ):
        assert sorted(names - names_where(column)) == [], column
