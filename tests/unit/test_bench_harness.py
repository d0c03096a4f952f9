"""The benchmarks' shared harness: summary lines, the smoke check, order statistics, and
the listen flags every bench sidecar gets."""

from __future__ import annotations

import math
from pathlib import Path

from bench.harness.report import parse_summary, summary_line
from bench.harness.stats import median, percentile, quartiles
from bench.harness.workers import split_concurrency
from bench.smoke import BENCHES, check


def test_summary_line_round_trips_through_parse_summary() -> None:
    """A summary line parses back into its pairs; floats get three decimals."""
    line = summary_line({"hot_vs_echo": 0.9124, "rules": "50", "store": "embedded"})
    assert line == "hot_vs_echo=0.912 rules=50 store=embedded"
    assert parse_summary(line) == {"hot_vs_echo": "0.912", "rules": "50", "store": "embedded"}


def test_parse_summary_rejects_lines_that_are_not_all_pairs() -> None:
    """A table row or a comment is not a summary line."""
    assert parse_summary("# total 7 s, load average now 3.99") == {}
    assert parse_summary("hot 16 2,608 0.88") == {}
    assert parse_summary("") == {}
    assert parse_summary("=1 a=2") == {}


def test_smoke_check_needs_exit_zero_and_every_quoted_key() -> None:
    """The smoke check fails a bench on a non-zero exit, a missing summary line or a
    summary without one of its keys, and passes a complete one."""
    keys = BENCHES["policy"]
    good = "table\n" + " ".join(f"{k}=1.0" for k in keys) + "\n"
    assert check("policy", 0, good) == ""
    assert check("policy", 1, good) == "exit status 1"
    assert "not a key=value summary" in check("policy", 0, good + "# trailing comment\n")
    missing = " ".join(f"{k}=1.0" for k in keys[1:])
    assert check("policy", 0, missing) == f"summary line without {keys[0]}"


def test_order_statistics_skip_nan_and_use_nearest_rank() -> None:
    """Median and quartiles leave NaN out; p99 of 100 samples is the 99th smallest."""
    assert median([3.0, math.nan, 1.0, 2.0]) == 2.0
    assert math.isnan(median([math.nan]))
    assert quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (1.5, 4.5)
    assert all(math.isnan(q) for q in quartiles([1.0]))
    samples = [float(i) for i in range(1, 101)]
    assert percentile(samples, 0.99) == 99.0
    assert percentile(samples, 0.50) == 50.0
    assert percentile([7.0], 0.99) == 7.0


def test_concurrency_is_split_evenly_over_workers() -> None:
    """Each worker gets its share of the in-flight calls; the shares add up."""
    assert split_concurrency(16, 3) == [6, 5, 5]
    assert split_concurrency(1, 2) == [1, 0]


def test_bench_sidecars_never_listen_on_a_default_address() -> None:
    """Every listener of a bench sidecar is either on its own free port or switched off
    by flag, so two sidecars of one run never both reach for 9464 or 50052."""
    from bench.harness.procs import SidecarPorts, SidecarSpec
    from bench.invalidate.without_freshness import config_from

    specs = [
        SidecarSpec("plain"),
        SidecarSpec("admin", ports=SidecarPorts.free(admin=True)),
        SidecarSpec("all", ports=SidecarPorts.free(admin=True, metrics=True, health=True)),
    ]
    seen: set[str] = set()
    for spec in specs:
        argv = spec.proc().argv
        config = config_from(argv[argv.index("serve") + 1 :], environ={})
        addresses = [*config.server.listen, *config.server.health_listen, *config.admin.listen]
        metrics = config.telemetry.metrics_listen
        addresses += [metrics] if metrics else []
        assert addresses, spec.name
        for addr in addresses:
            assert addr.startswith("127.0.0.1:"), (spec.name, addr)
            assert addr not in seen, (spec.name, addr)
            seen.add(addr)
    assert len(seen) == 1 + 2 + 4


def test_every_bench_has_a_smoke_run_in_ci() -> None:
    """Each `python -m bench.<name>` (a module with main() or a package with __main__)
    is in bench.smoke's table, so a new bench cannot stay out of make bench-smoke."""
    root = Path(__file__).resolve().parents[2] / "bench"
    modules = {p.stem for p in root.glob("*.py") if "def main(" in p.read_text()}
    packages = {p.parent.name for p in root.glob("*/__main__.py")}
    assert modules | packages == set(BENCHES) | {"smoke"}
