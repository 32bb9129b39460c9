"""Compare two checkouts with ``bench/service.py`` in interleaved rounds: the median paired ratio of
every figure.

On a shared host the same code can differ by 1.6x from one minute to the next (docs/benchmarks.md),
so each round runs the base checkout's own ``bench/service.py`` and this one's on the same minutes,
in alternating order (base first in odd rounds, this checkout first in even ones: whichever runs
second in a round met a warmer or busier host, and a fixed order read that as a difference between
the checkouts); a figure's ratio is taken within each round and the median over rounds is reported.
Every ratio is oriented as a cost (above 1: this checkout is slower): latency this ÷ base,
requests a second base ÷ this, RSS this ÷ base.

Run (a worktree of the base commit, e.g. ``git worktree add /tmp/base <commit>``)::

    .venv/bin/python bench/interleaved.py --base /tmp/base --rounds 4 -- \\
        --workers 1 --conns 1 8 --duration 4 --scenarios diag_rules_10 diag_clf_10 session_step_clf

Arguments after ``--`` go to both checkouts' ``bench/service.py``; ``--json FILE`` writes every
round's results and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_service_bench(tree: Path, args: list[str]) -> dict[str, Any]:
    """``tree``'s ``bench/service.py`` with ``args``, importing ``tree``'s code; its JSON results."""
    with tempfile.TemporaryDirectory(prefix="triage-interleaved-") as tmp:
        out = Path(tmp) / "r.json"
        env = {**os.environ, "PYTHONPATH": f"{tree}:{tree / 'client'}"}
        proc = subprocess.run([sys.executable, str(tree / "bench" / "service.py"), *args, "--json", str(out)],
                              cwd=tree, env=env, capture_output=True, text=True)
        if proc.returncode != 0 or not out.is_file():
            raise SystemExit(f"{tree}: bench/service.py failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-3000:]}")
        data: dict[str, Any] = json.loads(out.read_text())
        return data


def figures(data: dict[str, Any]) -> dict[str, tuple[float, bool]]:
    """``name → (value, higher is better)`` of one run's results."""
    out: dict[str, tuple[float, bool]] = {}
    for r in data["results"]:
        if r.get("sustained"):
            continue
        key = f"w{r['workers']} {r['scenario']} c{r['conns']}"
        out[f"{key} p50 ms"] = (float(r["p50_ms"]), False)
        out[f"{key} p99 ms"] = (float(r["p99_ms"]), False)
        out[f"{key} req/s"] = (float(r["rps"]), True)
    for workers, values in data.get("rss_mb", {}).items():
        if values:
            out[f"w{workers} RSS MB (max worker)"] = (max(values), False)
    return out


def cost_ratio(head: float, base: float, higher_is_better: bool) -> float:
    """Above 1: ``head`` costs more than ``base``."""
    if higher_is_better:
        return base / head if head else float("inf")
    return head / base if base else float("inf")


def main() -> None:
    argv = sys.argv[1:]
    passed: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passed = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True, help="a checkout of the base commit")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--limit", type=float, default=1.05, help="the target: every median ratio at most this")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if not (args.base / "bench" / "service.py").is_file():
        ap.error(f"--base {args.base}: no bench/service.py there")
    rounds: list[dict[str, Any]] = []
    for i in range(args.rounds):
        if i % 2 == 0:
            base = run_service_bench(args.base.resolve(), passed)
            head = run_service_bench(ROOT, passed)
        else:
            head = run_service_bench(ROOT, passed)
            base = run_service_bench(args.base.resolve(), passed)
        rounds.append({"base": base, "head": head, "first": "base" if i % 2 == 0 else "head"})
        print(f"round {i + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    ratios: dict[str, list[float]] = {}
    values: dict[str, tuple[list[float], list[float]]] = {}
    for r in rounds:
        fb, fh = figures(r["base"]), figures(r["head"])
        for name in fb.keys() & fh.keys():
            ratios.setdefault(name, []).append(cost_ratio(fh[name][0], fb[name][0], fb[name][1]))
            values.setdefault(name, ([], []))[0].append(fb[name][0])
            values[name][1].append(fh[name][0])
    print(f"{'figure':42s} {'base (median)':>14s} {'this (median)':>14s} {'median cost ratio':>18s}  per round")
    worst = 0.0
    summary = {}
    for name in sorted(ratios):
        med = statistics.median(ratios[name])
        worst = max(worst, med)
        b, h = values[name]
        summary[name] = {"median_ratio": med, "ratios": ratios[name], "base": b, "this": h}
        print(f"{name:42s} {statistics.median(b):14.2f} {statistics.median(h):14.2f} {med:18.3f}  "
              + " ".join(f"{x:.2f}" for x in ratios[name]))
    print(f"worst median cost ratio {worst:.3f} (target ≤ {args.limit}): {'met' if worst <= args.limit else 'MISSED'}")
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "ratios": summary, "worst": worst}, indent=1) + "\n")


if __name__ == "__main__":
    main()
