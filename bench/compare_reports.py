"""Compare two runs of a report's JSON (``reports/real.json``, ``reports/learning.json``): every
figure that differs, printed.

A rebuild that must not change the models' answers reruns the reports at the base commit and at the
branch and compares them with this script (issue 32's check):

* **point estimates** (every number, string and flag outside an interval) equal to ``--atol``
  (default 1e-9);
* **intervals** (the numbers under a key ``ci``, ``interval``, ``intervals`` or ending ``_ci``)
  within ``--interval-tol`` (default 0.01): the bootstrap's draws may change;
* **bootstrap replicates** (the top-level ``replicates`` of ``learning.json``: the draws themselves)
  and **run facts** (``seconds``, ``generated``) are counted, not compared.

Usage::

    python bench/compare_reports.py /work/base-reports reports            # real.json and learning.json in both
    python bench/compare_reports.py old/real.json new/real.json

Exit status 0 when everything is within its tolerance, 1 when a figure is not, 2 on unusable input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPORTS = ("real.json", "learning.json")
INTERVAL_KEYS = frozenset({"ci", "interval", "intervals"})
REPLICATE_ROOTS = frozenset({"replicates"})
RUN_FACTS = frozenset({"seconds", "generated"})


@dataclass
class Comparison:
    """What one pair of reports differs in."""

    atol: float
    interval_tol: float
    points: int = 0
    intervals: int = 0
    skipped: int = 0
    widest_interval_change: float = 0.0
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def kind_of(path: tuple[str, ...]) -> str:
    """``interval``, ``replicates``, ``fact`` or ``point`` for the leaf at ``path``."""
    if path and path[0] in REPLICATE_ROOTS:
        return "replicates"
    names = [p for p in path if not p.startswith("[")]
    if any(p in RUN_FACTS for p in names):
        return "fact"
    if any(p in INTERVAL_KEYS or p.endswith("_ci") for p in names):
        return "interval"
    return "point"


def leaves(x: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every leaf of a JSON value with its path (list items as ``[i]``)."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from leaves(v, (*path, str(k)))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from leaves(v, (*path, f"[{i}]"))
    else:
        yield path, x


def show(path: tuple[str, ...]) -> str:
    return "".join(p if p.startswith("[") else f".{p}" for p in path).lstrip(".")


def _numbers(a: Any, b: Any) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))


def compare(a: Any, b: Any, *, atol: float = 1e-9, interval_tol: float = 0.01) -> Comparison:
    """Compare report ``a`` (the base) with report ``b`` leaf by leaf."""
    out = Comparison(atol, interval_tol)
    left, right = dict(leaves(a)), dict(leaves(b))
    for path in sorted(left.keys() | right.keys()):
        kind = kind_of(path)
        if kind in ("replicates", "fact"):
            out.skipped += 1
            continue
        if path not in left or path not in right:
            where = "branch" if path not in left else "base"
            out.failures.append(f"{show(path)}: only in the {where} ({left.get(path, right.get(path))!r})")
            continue
        x, y = left[path], right[path]
        if kind == "interval":
            out.intervals += 1
        else:
            out.points += 1
        if _numbers(x, y):
            if math.isnan(x) and math.isnan(y):
                continue
            d = abs(x - y)
            if kind == "interval":
                out.widest_interval_change = max(out.widest_interval_change, d)
                if d > interval_tol:
                    out.failures.append(f"{show(path)}: interval bound {x} -> {y} (|Δ| {d:.4g} > {interval_tol})")
                elif d > atol:
                    out.notes.append(f"{show(path)}: interval bound {x} -> {y} (|Δ| {d:.4g})")
            elif not d <= atol:
                out.failures.append(f"{show(path)}: {x} -> {y} (|Δ| {d:.4g})")
        elif x != y:
            out.failures.append(f"{show(path)}: {x!r} -> {y!r}")
    return out


def pairs(base: Path, branch: Path) -> list[tuple[str, Path, Path]]:
    """The report files to compare: two files, or the reports two folders both hold."""
    if base.is_file() and branch.is_file():
        return [(base.name, base, branch)]
    if base.is_dir() and branch.is_dir():
        found = [(n, base / n, branch / n) for n in REPORTS if (base / n).is_file() and (branch / n).is_file()]
        if found:
            return found
        raise SystemExit(f"error: neither {base} nor {branch} holds both copies of any of {', '.join(REPORTS)}")
    raise SystemExit(f"error: give two files or two folders; got {base} and {branch}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path, help="the base commit's report (file or reports folder)")
    ap.add_argument("branch", type=Path, help="the branch's report (file or reports folder)")
    ap.add_argument("--atol", type=float, default=1e-9, help="point estimates: largest |difference| (1e-9)")
    ap.add_argument("--interval-tol", type=float, default=0.01, help="interval bounds: largest |difference| (0.01)")
    ap.add_argument("--quiet", action="store_true", help="do not list the interval bounds that moved within tolerance")
    a = ap.parse_args(argv)
    status = 0
    for name, base, branch in pairs(a.base, a.branch):
        try:
            c = compare(json.loads(base.read_text(encoding="utf-8")), json.loads(branch.read_text(encoding="utf-8")),
                        atol=a.atol, interval_tol=a.interval_tol)
        except (OSError, json.JSONDecodeError) as exc:
            print(f"error: {name}: {exc}", file=sys.stderr)
            return 2
        print(f"== {name}: {base} vs {branch}: {c.points} point figures, {c.intervals} interval bounds compared "
              f"({c.skipped} replicates and run facts skipped); widest interval change {c.widest_interval_change:.4g}")
        for line in c.failures:
            print(f"DIFFERS  {line}")
        if not a.quiet:
            for line in c.notes:
                print(f"within   {line}")
        print(f"{name}: {'OK' if c.ok else f'{len(c.failures)} figure(s) differ'}")
        status = status or (0 if c.ok else 1)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
