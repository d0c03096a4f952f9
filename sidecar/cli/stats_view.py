"""Rendering GetStatsResponse for `infercache stats`: a JSON document and a rich table.

Pure functions of the response message (no gRPC), so they are tested directly.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.json_format import MessageToDict
from infercache.v1 import admin_pb2 as PB2
from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from sidecar.cli.verification_view import verification_dict, verification_table
from sidecar.observability.stats import NO_VERSION, OTHER_VERSION


def stats_dict(resp: PB2.GetStatsResponse) -> dict[str, Any]:
    """The response as JSON-ready data; `versions` is keyed by model version."""
    versions: dict[str, Any] = {}
    for v in resp.versions:
        d = MessageToDict(
            v, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        del d["model_version"]
        # uint64 fields come out of MessageToDict as strings (JSON's number range).
        versions[v.model_version] = {
            k: ({kk: int(vv) for kk, vv in x.items()} if isinstance(x, dict) else int(x))
            for k, x in d.items()
        }
    return {
        "member_id": resp.member_id,
        "epoch": resp.epoch,
        "confirmed": resp.confirmed,
        "uptime_seconds": round(resp.uptime_seconds, 3),
        "counters": dict(sorted(resp.counters.items())),
        "global_counters": dict(sorted(resp.global_counters.items())),
        "tiers": [{"name": t.name, "bytes": t.bytes, "entries": t.entries} for t in resp.tiers],
        "versions": versions,
        # GetServerInfo's answer: the pod's model fingerprint ("" without --model-path).
        "server": {
            "server_version": resp.server.server_version,
            "key_schema_version": resp.server.key_schema_version,
            "model_version": resp.server.model_version,
            "adapter_versions": dict(sorted(resp.server.adapter_versions.items())),
            "warm_tier": resp.server.warm_tier,
        },
        "verification": verification_dict(resp),
    }


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def _sum_prefix(counts: Any, prefix: str) -> int:
    return sum(n for k, n in counts.items() if k == prefix or k.startswith(prefix + "."))


def _size(n: int) -> str:
    if n < 0:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)  # pragma: no cover


# A fingerprint is 68 characters ("fp1-" + 64 hex): in a table it is shown as its first
# 8 hex digits (unique enough to tell versions apart), and spelt out once below the tables.
_SHORT_HEX = 8


def short_version(version: str) -> str:
    """`fp1-ddd86342…` for a full fingerprint; other labels unchanged."""
    if version.startswith("fp1-") and len(version) > 4 + _SHORT_HEX + 1:
        return version[: 4 + _SHORT_HEX] + "…"
    return version


def version_rows(resp: PB2.GetStatsResponse) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Per model version: (reads row, writes row) in the column orders of READ_COLUMNS and
    WRITE_COLUMNS (versions as short_version shows them)."""
    rows: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    for v in resp.versions:
        lk = v.lookups
        total = sum(lk.values())
        hits_hot, hits_warm = lk.get("hit.hot", 0), lk.get("hit.warm", 0)
        label = short_version(v.model_version)
        reads = (
            label,
            str(total),
            _pct(hits_hot + hits_warm, total),
            str(hits_hot),
            str(hits_warm),
            str(lk.get("miss", 0)),
            str(lk.get("bypass", 0)),
            str(v.degraded),
            f"{v.saved_latency_ms / 1000:.1f}",
            str(v.saved_prompt_tokens + v.saved_completion_tokens),
        )
        writes = (
            label,
            str(v.stores.get("stored", 0)),
            str(_sum_prefix(v.stores, "refused")),
            str(_sum_prefix(v.stores, "failed")),
            str(sum(v.rejected.values())),
            str(v.dead),
            str(_sum_prefix(v.downstream, "rejected")),
            str(v.invalidations),
        )
        rows.append((reads, writes))
    return rows


# Multi-word headers break between words only (each word on its own line), never inside
# one; the widest header word sets a column's width, so both tables fit 80 columns.
READ_COLUMNS = (
    "model\nversion",
    "lookups",
    "hit %",
    "hot",
    "warm",
    "miss",
    "bypass",
    "degraded",
    "saved\ns",
    "saved\ntok",
)
WRITE_COLUMNS = (
    "model\nversion",
    "stored",
    "refused",
    "failed",
    "rejected",
    "dead",
    "downstream\nrejected",
    "invali-\ndations",
)

LABEL_NOTES = {
    NO_VERSION: "_none: events of no model version (a key without one on a pod without "
    "--model-path, a rule for the whole store)",
    OTHER_VERSION: "_other: versions past INFERCACHE_METRICS_MAX_MODEL_VERSIONS, summed",
}


def _table(title: str, columns: tuple[str, ...]) -> Table:
    table = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for i, name in enumerate(columns):
        # no_wrap: a number or a version label is never split across lines.
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    return table


def version_notes(resp: PB2.GetStatsResponse) -> list[str]:
    """Lines below the tables: each shortened fingerprint in full, and what _none and
    _other stand for when they appear."""
    notes = []
    for v in resp.versions:
        if short_version(v.model_version) != v.model_version:
            notes.append(f"{short_version(v.model_version)} = {v.model_version}")
        elif v.model_version in LABEL_NOTES:
            notes.append(LABEL_NOTES[v.model_version])
    return notes


def stats_table(resp: PB2.GetStatsResponse, source: str) -> Group:
    """A header line, the per-version table and the reasons (bypass, refusal, rejection)."""
    state = "confirmed current" if resp.confirmed else "NOT confirmed current (no hot hits)"
    tiers = ", ".join(
        f"{t.name} {_size(t.bytes)} / {t.entries if t.entries >= 0 else '?'} entries"
        for t in resp.tiers
    )
    model = resp.server.model_version or "none (no --model-path)"
    header = Text(
        f"{source}  member {resp.member_id[:12]}  epoch {resp.epoch} ({state})  "
        f"up {resp.uptime_seconds:.0f} s\nmodel: {model}\ntiers: {tiers or '-'}",
        overflow="fold",
    )
    reads = _table("lookups per model version, since start", READ_COLUMNS)
    writes = _table("stores, rejections, invalidations", WRITE_COLUMNS)
    for read_row, write_row in version_rows(resp):
        reads.add_row(*read_row)
        writes.add_row(*write_row)
    reasons = _table("reasons", ("model\nversion", "what", "reason", "count"))
    for v in resp.versions:
        for what, counts in (
            ("bypass", v.bypasses),
            ("store", v.stores),
            ("rejected entry", v.rejected),
            ("downstream", v.downstream),
            ("lease", v.leases),
        ):
            for reason, n in sorted(counts.items()):
                if what == "store" and reason == "stored":
                    continue
                reasons.add_row(short_version(v.model_version), what, reason, str(n))
    g = resp.global_counters
    footer = Text(
        f"warm tier failures: read {g.get('warm_read_failures', 0)}, "
        f"write {g.get('warm_write_failures', 0)}; reclaimed {g.get('reclaimed', 0)}"
    )
    parts: list[Any] = [header, reads, writes]
    if reasons.row_count:
        parts.append(reasons)
    checked = verification_table(resp, short_version, _table)
    if checked is not None:
        parts.append(checked)
    parts.append(footer)
    # Plain lines, folded only at the terminal's edge (a fingerprint is 68 characters).
    parts += [Text(line, overflow="fold") for line in version_notes(resp)]
    return Group(*parts)
