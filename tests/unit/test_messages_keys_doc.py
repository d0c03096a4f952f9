"""docs/keys.md's Messages table and sidecar/wire/anthropic/keys.py agree: every body
field the code knows has a row, every row names a field the code knows, and what the
table calls excluded (or not cached) is what the code leaves out (or forwards uncached).
(test_keys_doc.py checks the key fields the rows name against the proto.)"""

from __future__ import annotations

import re
from pathlib import Path

from sidecar.wire.anthropic import keys

DOC = Path(__file__).resolve().parents[2] / "docs" / "keys.md"
_CODE = re.compile(r"`([^`]+)`")


def rows() -> list[tuple[list[str], str]]:
    """(top-level body fields, key field cell) of each row of the Messages table."""
    text = DOC.read_text()
    section = text.split("## Messages (`POST /v1/messages`", 1)[1].split("\n## ", 1)[0]
    out = []
    for line in section.splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cols) != 3 or not cols[0].startswith("`"):
            continue
        named = _CODE.findall(re.sub(r"\([^)]*\)", "", cols[0]))  # not "(`text` block)"
        fields = [re.split(r"[.\[]", name, maxsplit=1)[0] for name in named]
        out.append((fields, cols[1]))
    return out


def test_every_known_field_has_a_row_and_every_row_a_field() -> None:
    named = {f for fields, _ in rows() for f in fields}
    known = keys.KNOWN | keys.EXTRA_KNOWN | keys.EXCLUDED
    assert named - known == set(), "rows for fields the code does not know"
    assert known - named == set(), "fields the code knows without a row"


def test_excluded_and_not_cached_rows_match_the_code() -> None:
    excluded = {f for fields, cell in rows() if cell == "excluded" for f in fields}
    uncached = {f for fields, cell in rows() if cell == "not cached" for f in fields}
    assert excluded == keys.EXCLUDED
    assert uncached == set(keys.UNCACHED)


def test_the_rules_version_is_the_one_documented() -> None:
    assert "`RULES_VERSION` in `sidecar/wire/anthropic/keys.py`" in DOC.read_text()
