"""python -m bench.fingerprint: build the checkpoints, compare the methods, print the
tables and the key=value summary line (see the package docstring)."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from bench.fingerprint.checkpoints import SHARDS, Builder, variants
from bench.fingerprint.methods import (
    METHODS,
    Evictor,
    cold_times,
    hash_ceiling,
    plain_read,
    warm_times,
)
from bench.fingerprint.startup import startup_window
from bench.harness.report import print_summary


def parse_size(text: str) -> int:
    """Bytes of a size like 1GiB, 512MiB or 4096 (argparse type)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(KiB|MiB|GiB|KB|MB|GB)?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 1GiB, 512MiB)")
    unit = {
        "KiB": 1 << 10,
        "MiB": 1 << 20,
        "GiB": 1 << 30,
        "KB": 10**3,
        "MB": 10**6,
        "GB": 10**9,
        None: 1,
    }[m.group(2)]
    return int(float(m.group(1)) * unit)


@contextlib.contextmanager
def workdir(keep: bool, parent: str | None) -> Iterator[Path]:
    """A temporary directory for the checkpoints (under `parent`, made if missing),
    removed afterwards unless `keep`."""
    if parent is not None:
        Path(parent).mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="infercache-fp-bench-", dir=parent))
    try:
        yield root
    finally:
        if keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def bind(fn: Callable[[Path], str], path: Path) -> Callable[[], str]:
    """fn bound to path, as a no-argument callable for the timing loops."""
    return lambda: fn(path)


def fmt_ms(seconds: float | None) -> str:
    """Milliseconds with thousands separators, n/a for None."""
    return "n/a" if seconds is None else f"{seconds * 1e3:,.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    """Build the checkpoints, compare the methods, print the tables and the summary."""
    parser = argparse.ArgumentParser(description="Model fingerprint benchmark")
    parser.add_argument("--size", type=parse_size, default=parse_size("1GiB"))
    parser.add_argument("--quick", action="store_true", help="~128 MiB, fewer repeats")
    parser.add_argument("--dir", help="parent directory for the temporary checkpoints")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="~8 MiB, one round; cold only through posix_fadvise (no global drop_caches)",
    )
    parser.add_argument(
        "--startup",
        action="store_true",
        help="only the base checkpoint and how long a sidecar start waits for its full hash",
    )
    args = parser.parse_args(argv)
    size = parse_size("8MiB") if args.smoke else parse_size("128MiB") if args.quick else args.size
    cold_repeat = 1 if args.quick or args.smoke else 3
    warm_rounds = 1 if args.smoke else 3 if args.quick else 7
    cpus = os.cpu_count() or 1

    with workdir(args.keep, args.dir) as root:
        builder = Builder(root, size)
        t0 = time.perf_counter()
        base = builder.write_base()
        if args.startup:
            return startup_only(builder, base, args.smoke)
        built = [(label, change, build()) for label, change, build in variants(builder)]
        shard_bytes = sum(p.stat().st_size for p in base.glob("*.safetensors"))
        print(
            f"checkpoint: {len(builder.specs)} tensors, {shard_bytes / 2**30:.2f} GiB in "
            f"{SHARDS} shards; {len(built)} variants built in {time.perf_counter() - t0:.1f} s; "
            f"{cpus} CPUs"
        )

        reference = {m: fn(base) for m, fn in METHODS.items()}
        rows = []
        for label, should_change, path in built:
            rows.append(
                (label, should_change, {m: fn(path) != reference[m] for m, fn in METHODS.items()})
            )

        print()
        print(f"{'variant':<22} {'expect':<8} " + " ".join(f"{m:>11}" for m in METHODS))
        for label, should_change, changed in rows:
            cells = []
            for m in METHODS:
                ok = changed[m] == should_change
                cells.append(f"{('changed' if changed[m] else 'same') + ('' if ok else ' !'):>11}")
            print(f"{label:<22} {'change' if should_change else 'same':<8} " + " ".join(cells))

        evictor = Evictor(("fadvise",) if args.smoke else ("drop_caches", "fadvise"))
        runs = {m: bind(fn, base) for m, fn in {**METHODS, "plain read": plain_read}.items()}
        warm = warm_times(runs, warm_rounds)
        cold = cold_times(runs, base, evictor, cold_repeat)
        timings = {m: (statistics.median(warm[m]), cold[m]) for m in runs}
        best = {m: min(v) for m, v in warm.items()}
        ceiling = statistics.median(hash_ceiling(shard_bytes, cpus) for _ in range(3))

        print()
        head = ("warm ms", "best ms", "cold ms", "warm GB/s", "cold GB/s")
        print(f"{'method':<12} " + " ".join(f"{h:>10}" for h in head))
        for m, (warm_s, cold_s) in timings.items():
            rates = ["", ""]
            if m in ("full", "plain read"):
                rates = [
                    "" if t is None else f"{shard_bytes / t / 1e9:.2f}" for t in (warm_s, cold_s)
                ]
            cells = [fmt_ms(warm_s), fmt_ms(best[m]), fmt_ms(cold_s), *rates]
            print(f"{m:<12} " + " ".join(f"{c:>10}" for c in cells))
        print(
            "warm = median of interleaved runs, best = fastest of them, "
            f"cold = median of {cold_repeat}"
        )
        rate = shard_bytes / ceiling / 1e9
        print(f"BLAKE3 alone on {cpus} threads, data in memory: {rate:.2f} GB/s")
        print(f"cold cache via: {evictor.how}")

        must = [r for r in rows if r[1]]
        detects = {m: sum(r[2][m] for r in must) for m in METHODS}
        stable = {m: all(not r[2][m] for r in rows if not r[1]) for m in METHODS}
        full_warm, full_cold = timings["full"]
        read_warm, read_cold = timings["plain read"]
        ratio_cold = (
            "n/a" if full_cold is None or read_cold is None else f"{read_cold / full_cold:.2f}"
        )
        window = startup_window(base, root, evictor, rounds=1 if args.smoke else 3)
        pairs = {
            "size_gib": f"{shard_bytes / 2**30:.2f}",
            "tensors": len(builder.specs),
            "cpus": cpus,
            "header8k_detects": f"{detects['8KB-header']}/{len(must)}",
            "fast_detects": f"{detects['fast']}/{len(must)}",
            "full_detects": f"{detects['full']}/{len(must)}",
            "reshard_stable": "yes" if stable["fast"] and stable["full"] else "no",
            "fast_ms_warm": f"{timings['fast'][0] * 1e3:.2f}",
            "fast_ms_warm_best": f"{best['fast'] * 1e3:.2f}",
            "fast_ms_cold": fmt_ms(timings["fast"][1]).replace(",", ""),
            "full_ms_warm": f"{full_warm * 1e3:.0f}",
            "full_gbps_warm": f"{shard_bytes / full_warm / 1e9:.2f}",
            "read_gbps_warm": f"{shard_bytes / read_warm / 1e9:.2f}",
            "full_vs_read": f"{read_warm / full_warm:.2f}",
            "full_vs_read_cold": ratio_cold,
            "hash_ceiling_vs_read": f"{read_warm / ceiling:.2f}",
            "cold": evictor.how,
            **window,
            "load1": f"{os.getloadavg()[0]:.1f}",
        }
        print()
        print_summary(pairs)
    return 0


def startup_only(builder: Builder, base: Path, smoke: bool) -> int:
    """--startup: the sidecar's start-up window on the base checkpoint alone."""
    shard_bytes = sum(p.stat().st_size for p in base.glob("*.safetensors"))
    print(f"checkpoint: {len(builder.specs)} tensors, {shard_bytes / 2**30:.2f} GiB")
    evictor = Evictor(("fadvise",) if smoke else ("drop_caches", "fadvise"))
    window = startup_window(base, builder.root, evictor, rounds=1 if smoke else 3)
    pairs = {"size_gib": f"{shard_bytes / 2**30:.2f}", "cpus": os.cpu_count() or 1, **window}
    print_summary({**pairs, "load1": f"{os.getloadavg()[0]:.1f}"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
