"""Benchmark: our CUSUM against river's PageHinkley and ADWIN and ruptures' Window (online),
at matched false-alarm rates, on seeded synthetic streams; plus Siegmund's theory against the
measured run lengths, the in-control run length when the baseline is learnt from a short
warm-up, and alarm episodes — ``triage cusum`` itself on 100 seeded streams with a held shift
(false alarms against the binomial interval ARL0 implies, detection, delay, one alarm per change).

Run:  .venv/bin/python bench/changepoint.py            (≈ 1-2 min on 2 cores)
      .venv/bin/python bench/changepoint.py --small    (seconds; smoke run)

Prints Markdown tables (paste them into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from model.streams.batch import episodes  # noqa: E402
from model.training.streams.episodes import EpisodeScore, score_episodes, shifted_streams  # noqa: E402
from model.training.streams.evaluation import compare_peers, theory_vs_measured, warmup_effect  # noqa: E402


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


def cli_alarms(
    values: list[object], *, warmup: int, arl0: float, shift: float, folder: Path
) -> list[list[tuple[int, str, int | None]]]:
    """Each stream through ``triage cusum FILE --column value --warmup N`` (the CLI in-process)."""
    from typer.testing import CliRunner

    from serve.cli.main import app

    runner = CliRunner()
    out = []
    for r, x in enumerate(values):
        path = folder / f"stream{r:03d}.csv"
        path.write_text("value\n" + "\n".join(f"{v:.17g}" for v in x) + "\n", encoding="utf-8")  # type: ignore[attr-defined]
        args = [
            "cusum",
            str(path),
            "--column",
            "value",
            "--warmup",
            str(warmup),
            "--arl0",
            str(arl0),
            "--shift",
            str(shift),
        ]
        res = runner.invoke(app, args)
        if res.exit_code != 0:
            raise SystemExit(f"triage {' '.join(args)} failed: {res.output}")
        out.append([(a["index"], a["direction"], a["closed"]) for a in json.loads(res.stdout)["alarms"]])
    return out


def print_episodes(score: EpisodeScore, *, warmup: int, shifted: int, shift: float) -> bool:
    lo, hi = score.false_alarm_interval()
    slo, shi = score.false_alarm_stream_interval()
    n = score.streams
    detected = score.detected / n
    checks = {
        "false alarms in the binomial 95 % interval": lo <= score.false_alarms <= hi,
        "≥ 95 % of shifts detected": detected >= 0.95,
        "median delay ≤ 12": score.median_delay <= 12,
        "exactly one alarm per detected shift": score.extra == 0,
    }
    print(
        f"{n} streams: {warmup} warm-up + {score.in_control} in-control N(0, 1) points, then +{shift:g}σ held "
        f"for {shifted}; `triage cusum --warmup {warmup} --arl0 {score.arl0:g} --shift {shift:g}`"
    )
    print(f"| figure | measured | expected (ARL0 = {score.arl0:g}) |")
    print("|---|---|---|")
    print(
        f"| false alarms in the {n * score.in_control:,} in-control points | {score.false_alarms} | "
        f"{n * score.in_control / score.arl0:.0f}, 95 % interval [{lo}, {hi}] |"
    )
    print(f"| streams with a false alarm | {score.streams_with_false_alarm} | 95 % interval [{slo}, {shi}] |")
    print(
        f"| shifts detected (a new alarm at or after the change) | {score.detected} / {n} ({100 * detected:.1f} %) | ≥ 95 % |"
    )
    print(f"| missed: an upward false alarm's episode still open at the change | {score.already_open} | |")
    print(f"| missed: no alarm at all | {n - score.detected - score.already_open} | |")
    print(
        f"| delay of the new alarms, median (mean) | {score.median_delay:.0f} ({np.mean(score.delays):.1f}) | ≤ 12 |"
    )
    print(f"| alarms after the first in the shifted part | {score.extra} | 0 |")
    for name, ok in checks.items():
        print(f"- {'PASS' if ok else 'FAIL'}: {name}")
    return all(checks.values())


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

    print("## Alarm episodes: `triage cusum` on seeded streams with one held shift")
    t0 = time.perf_counter()
    episodes_ok = True
    for n_streams in (20,) if args.small else (100, 1000):
        streams = shifted_streams(
            n_streams, warmup=200, in_control=400, shifted=200, shift=args.shift, seed=args.seed
        )
        with tempfile.TemporaryDirectory() as tmp:
            alarms = cli_alarms(streams, warmup=200, arl0=args.arl0, shift=args.shift, folder=Path(tmp))
        score = score_episodes(alarms, warmup=200, in_control=400, arl0=args.arl0)
        ok = print_episodes(score, warmup=200, shifted=200, shift=args.shift)
        episodes_ok = episodes_ok and (ok or n_streams != 100)  # 1,000 streams: for precision
        print(f"({time.perf_counter() - t0:.1f} s)")
        print()

    if not args.small:
        print("## The same check on other seeds: ten more batches of 100 streams (seeds 1-10)")
        print(
            "`model.streams.episodes` directly (what `triage cusum` runs), so that the seed-0 batch above "
            "can be told from luck"
        )
        t0 = time.perf_counter()
        print(
            "| seed | false alarms (interval) | detected | missed: false alarm's episode open | median delay | extra alarms |"
        )
        print("|---|---|---|---|---|---|")
        batch: list[EpisodeScore] = []
        for seed in range(1, 11):
            streams = shifted_streams(
                100, warmup=200, in_control=400, shifted=200, shift=args.shift, seed=seed
            )
            alarms = [
                [
                    (a.index, a.direction, closed)
                    for a, closed in episodes(x, warmup=200, arl0=args.arl0, shift=args.shift)
                ]
                for x in streams
            ]
            sc = score_episodes(alarms, warmup=200, in_control=400, arl0=args.arl0)
            batch.append(sc)
            lo, hi = sc.false_alarm_interval()
            print(
                f"| {seed} | {sc.false_alarms} ([{lo}, {hi}]) | {sc.detected} | {sc.already_open} | "
                f"{sc.median_delay:.1f} | {sc.extra} |"
            )
        det = sorted(b.detected for b in batch)
        print(
            f"detected: min {det[0]}, median {float(np.median(det)):g}, max {det[-1]} of 100; "
            f"batches with ≥ 95: {sum(d >= 95 for d in det)} / 10; "
            f"batches with 0 extra alarms: {sum(b.extra == 0 for b in batch)} / 10"
        )
        print(f"({time.perf_counter() - t0:.1f} s)")
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

    print("## In-control run length when the baseline is learnt from the warm-up (self-starting)")
    t0 = time.perf_counter()
    print("| warm-up | ARL0 mean | run length median | median / known-baseline median |")
    print("|---|---|---|---|")
    rows = warmup_effect(arl0=args.arl0, shift=args.shift, n_runs=runs * 2, seed=args.seed)
    known = rows[0].arl0_median
    for w in rows:
        label = "given (μ, σ known)" if w.warmup is None else str(w.warmup)
        print(f"| {label} | {w.arl0_mean:.0f} | {w.arl0_median:.0f} | {w.arl0_median / known:.3f} |")
    w100 = next(w for w in rows if w.warmup == 100)
    median_ok = abs(w100.arl0_median / known - 1.0) <= 0.2
    print(
        f"- {'PASS' if median_ok else 'FAIL'}: 100-point warm-up median within 20 % of the known-baseline one"
    )
    print(f"({runs * 2} runs each, censored at {8 * args.arl0:.0f}; {time.perf_counter() - t0:.1f} s)")
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
    print(f"alarm checks: {'all PASS' if episodes_ok and median_ok else 'some FAIL'}")

    if args.plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        from model.training.streams.plots import plot_peer_delays

        fig = plot_peer_delays(comp)
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=110, bbox_inches="tight")
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
