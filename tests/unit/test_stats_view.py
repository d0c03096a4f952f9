"""`infercache stats` tables: readable at 80 columns, fingerprints spelt out once."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from sidecar.api.admin_codec import stats_to_pb
from sidecar.cli.stats_view import READ_COLUMNS, WRITE_COLUMNS, short_version, stats_table
from sidecar.observability.stats import CacheStats

FP = "fp1-" + "ddd863423457913833bfb38f000abeae0355d584b5c2c2dcd53e27f9" + "0a1b2c3d"


def render(width: int) -> str:
    """The table for one fingerprinted version and one without a version."""
    stats = CacheStats()
    stats.admit(FP)
    stats.count_lookup(FP, "hit", "warm")
    stats.count_lookup(FP, "miss")
    stats.count_lookup("", "miss")
    stats.count_store(FP, "refused", "stale_lease")
    out = io.StringIO()
    Console(file=out, width=width).print(stats_table(stats_to_pb(stats, []), "127.0.0.1:50052"))
    return out.getvalue()


@pytest.mark.parametrize("width", [80, 120])
def test_no_header_word_or_cell_is_cut(width: int) -> None:
    """Every header word appears whole, and the only ellipsis is a shortened fingerprint's."""
    text = render(width)
    for header in (*READ_COLUMNS, *WRITE_COLUMNS):
        for word in header.split("\n"):
            assert word in text, (width, word)
    assert text.count("…") == text.count(short_version(FP))


@pytest.mark.parametrize("width", [80, 120])
def test_fingerprint_is_shown_whole_on_one_line(width: int) -> None:
    """The 68-character fingerprint is written out once, unbroken, below the tables."""
    assert len(FP) == 68
    lines = render(width).splitlines()
    assert any(FP in line for line in lines)


def test_none_row_is_explained() -> None:
    """The `_none` label comes with a note saying what it counts."""
    text = render(120)
    assert "_none " in text
    assert "_none: events of no model version" in text
