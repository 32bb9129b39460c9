"""Benchmark: our CUSUM against river's PageHinkley and ADWIN and ruptures' Window (online),
at matched false-alarm rates, on seeded synthetic streams; plus Siegmund's theory against the
measured run lengths, and the cost of estimating the baseline from a short warm-up.

Run:  .venv/bin/python bench/changepoint.py            (≈ 1-2 min on 2 cores)
      .venv/bin/python bench/changepoint.py --small    (seconds; smoke run)

Prints Markdown tables (paste them into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from model.streams.evaluation import compare_peers, theory_vs_measured, warmup_effect  # noqa: E402


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="few runs: a smoke test, not figures")
    ap.add_argument("--arl0", type=float, default=500.0)
    ap.add_argument("--shift", type=float, default=1.0)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", type=Path, help="save the delay comparison as a PNG here")
    args = ap.parse_args(argv)

    runs = 40 if args.small else 300
    t_start = time.perf_counter()
    print(f"# changepoint benchmark — {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC")
    print(f"machine: {machine()}")
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print()

    print("## Siegmund's approximation vs measured run lengths (known baseline, zero-state)")
    t0 = time.perf_counter()
    rows = theory_vs_measured(arl0=args.arl0, shift=args.shift, n_runs=runs * 4, seed=args.seed)
    print(f"k = {args.shift / 2:g}, h from ARL0 = {args.arl0:g}; {runs * 4} runs each")
    print("| true shift (σ) | Siegmund ARL | measured ARL | measured / Siegmund |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r.shift:g} | {r.siegmund:.1f} | {r.measured:.1f} | {r.ratio:.3f} |")
    print(f"({time.perf_counter() - t0:.1f} s)")
    print()

    print("## In-control run length when the baseline is estimated from the warm-up")
    t0 = time.perf_counter()
    print("| warm-up | ARL0 mean | run length median |")
    print("|---|---|---|")
    for w in warmup_effect(arl0=args.arl0, shift=args.shift, n_runs=runs, seed=args.seed):
        label = "given (μ, σ known)" if w.warmup is None else str(w.warmup)
        print(f"| {label} | {w.arl0_mean:.0f} | {w.arl0_median:.0f} |")
    print(f"(runs censored at {8 * args.arl0:.0f}; {time.perf_counter() - t0:.1f} s)")
    print()

    print("## Detection delay at matched ARL0 (median (mean) samples to alarm, alarm included)")
    t0 = time.perf_counter()
    comp = compare_peers(
        arl0=args.arl0,
        shift=args.shift,
        warmup=args.warmup,
        pre=50,
        horizon=1000,
        n_runs_arl0=runs,
        n_runs_delay=runs,
        calibration_runs=runs,
        calibration_iterations=10 if args.small else 14,
        seed=args.seed,
        log=lambda m: print(f"  {m}"),
    )
    print()
    print(
        f"{runs} runs per cell; warm-up {args.warmup} + 50 in-control samples, then the change; "
        "FA = false alarm before the change (run left out), missed = no alarm within 1,000 samples"
    )
    print(comp.table())
    print(f"({time.perf_counter() - t0:.1f} s)")
    print()
    print(f"total {time.perf_counter() - t_start:.1f} s")

    if args.plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        from model.streams.plots import plot_peer_delays

        fig = plot_peer_delays(comp)
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=110, bbox_inches="tight")
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
