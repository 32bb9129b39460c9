"""Which detector raises each false alarm on a successful real run (issue 31: zero-shot must be precise).

A rule that raises a failure on a run the set labels successful is a defect of that rule. This
module runs the shipped rules (and, with ``classifier=True``, the shipped step classifier) over
the vendored real sets (:mod:`model.data.realdata`) and counts, per set × detector × kind, the
successful and the failed runs each raises a failure on (a finding at or above its kind's
threshold, before any measured confidence), with one example of its evidence.

It also gives the verdict's rule part as the service would give it to an unseen agent: each
rule's confidence and demotion measured on the *other* sets (leave-one-source-out, a set held out
with its family, :func:`model.data.realdata.loso_family`) through
:meth:`model.scoring.runscore.model.RunScorer.rule_raises`, and from that the false alarms and
recall of the rules on each held-out set.

``python -m model.training.false_alarms`` prints both tables (``--sets`` to choose the sets,
``--classifier`` to run the step classifier too, ``--json`` for the raw counts).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from model.core.findings import Finding
from model.data.realdata import RUN_LEVEL_SOURCES, SOURCES, RealRun, load_all, loso_family


@dataclass(frozen=True)
class Fired:
    """One detector's failure findings of one kind on one run."""

    detector: str
    kind: str
    step: int | None
    confidence: float
    evidence: str


@dataclass
class RunFindings:
    """The failures the detectors raise on one labelled run."""

    source: str
    run_id: str
    group: str
    failed: bool
    fired: list[Fired] = field(default_factory=list)

    @property
    def detectors(self) -> tuple[str, ...]:
        return tuple(sorted({f.detector for f in self.fired}))


def _failures(findings: Sequence[Finding]) -> list[Fired]:
    from model.diagnosis.diagnoser import DEFAULT_THRESHOLDS

    return [Fired(f.detector, f.kind.value, f.step, round(f.confidence, 4), f.evidence) for f in findings
            if f.confidence >= DEFAULT_THRESHOLDS[f.kind]]


def collect(runs: Sequence[RealRun], *, classifier: bool = False) -> list[RunFindings]:
    """The failures every shipped detector raises on each run (rules; the classifier if asked)."""
    from model.diagnosis.diagnoser import Diagnoser

    diag = Diagnoser.with_shipped_models(classifier=classifier, runscore=False)
    return [RunFindings(r.source, r.run_id, r.group, r.failed, _failures(diag.findings(r.trace))) for r in runs]


def table(found: Sequence[RunFindings]) -> list[dict[str, Any]]:
    """Per set × detector × kind: runs it fired on, successful and failed, with one example each
    (a successful run's when there is one: the false alarm to look at)."""
    totals: dict[str, dict[bool, int]] = {}
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in found:
        totals.setdefault(r.source, {True: 0, False: 0})[r.failed] += 1
        seen: set[tuple[str, str]] = set()
        for f in r.fired:
            if (f.detector, f.kind) in seen:
                continue
            seen.add((f.detector, f.kind))
            row = rows.setdefault((r.source, f.detector, f.kind), {
                "set": r.source, "detector": f.detector, "kind": f.kind, "successful_runs": totals[r.source],
                "fired_on_successful": 0, "fired_on_failed": 0, "example": None})
            row["fired_on_failed" if r.failed else "fired_on_successful"] += 1
            if row["example"] is None or (not r.failed and row["example"]["failed"]):
                row["example"] = {"run": r.run_id, "failed": r.failed, "step": f.step, "evidence": f.evidence[:200]}
    out = []
    for (s, _, _), row in sorted(rows.items(), key=lambda kv: (list(SOURCES).index(kv[0][0]), kv[0][1:])):
        t = totals[s]
        out.append({**row, "successful_runs": t[False], "failed_runs": t[True]})
    return out


def loso_verdicts(found: Sequence[RunFindings]) -> dict[str, dict[str, Any]]:
    """Per set: the rules' false alarms and recall when each rule's confidence and demotion are
    measured without the set's family (what an unseen agent gets: the training sets' counts through
    :func:`model.scoring.runscore.model.rule_stats` and
    :meth:`~model.scoring.runscore.model.RunScorer.rule_raises`), and which rules were demoted."""
    from model.scoring.runscore.model import RunScorer, rule_stats

    by_set = {s for s in (r.source for r in found)}
    stats_rows = [_StatRow(r.source, r.failed, r.detectors) for r in found]
    out: dict[str, dict[str, Any]] = {}
    for s in [x for x in SOURCES if x in by_set]:
        fam = loso_family(s)
        train = [e for e in stats_rows if loso_family(e.source) != fam]
        sets = [x for x in RUN_LEVEL_SOURCES if any(e.source == x for e in train)]
        scorer = RunScorer()
        scorer.rule_stats_ = rule_stats(train, sets)  # type: ignore[arg-type]  # reads rules, source, failed
        test = [r for r in found if r.source == s]
        raised = [any(scorer.rule_raises(f.detector, f.confidence) for f in r.fired) for r in test]
        ok = [x for x, r in zip(raised, test, strict=True) if not r.failed]
        bad = [x for x, r in zip(raised, test, strict=True) if r.failed]
        held: dict[str, dict[str, Any]] = {}
        for name, st in scorer.rule_stats_.items():
            fired = [r.failed for r in test if name in r.detectors]
            held[name] = {"measured": (st["fired"], st["precision"]), "demoted": st["demoted"],
                          "held_out": (len(fired), round(sum(fired) / len(fired), 4) if fired else None)}
        out[s] = {"false_alarms": (sum(ok), len(ok)), "recall": (sum(bad), len(bad)),
                  "demoted": sorted(k for k, v in scorer.rule_stats_.items() if v["demoted"]), "rules": held}
    return out


@dataclass(frozen=True)
class _StatRow:
    """What :func:`model.scoring.runscore.model.rule_stats` reads of an example."""

    source: str
    failed: bool
    rules: tuple[str, ...]


def _rate(hits: int, n: int) -> str:
    from model.training.semantic import wilson

    if n == 0:
        return "–"
    lo, hi = wilson(hits, n, z=1.96)
    return f"{100 * hits / n:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}] ({hits}/{n})"


def render(rows: Sequence[dict[str, Any]], verdicts: dict[str, dict[str, Any]]) -> str:
    lines = ["| set | detector | kind | successful runs | failed runs | example (run, step: evidence) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ex = r["example"]
        lines.append(f"| {r['set']} | {r['detector']} | {r['kind']} | "
                     f"{_rate(r['fired_on_successful'], r['successful_runs'])} | "
                     f"{_rate(r['fired_on_failed'], r['failed_runs'])} | "
                     f"{ex['run']}{' (ok)' if not ex['failed'] else ''}, {ex['step']}: "
                     f"{ex['evidence'][:120].replace('|', '/')} |")
    lines += ["", "Rules raising a failure once measured leave-one-source-out:", "",
              "| set | false alarms (successful runs) | recall (failed runs) | demoted without it |",
              "| --- | --- | --- | --- |"]
    for s, v in verdicts.items():
        lines.append(f"| {s} | {_rate(*v['false_alarms'])} | {_rate(*v['recall'])} | "
                     f"{', '.join(v['demoted']) or 'none'} |")
    names = sorted({n for v in verdicts.values() for n in v["rules"]})
    sets = [s for s, v in verdicts.items() if v["false_alarms"][1]]  # the sets with successful runs
    lines += ["", "Does a rule's firing predict failure on a set it was not measured on? Per held-out set: "
              "P(run failed | it fired) on the other sets (runs it fired on; sets weighted equally) → on "
              "the held-out set; `demoted` where the other sets demote it:", "",
              "| rule | " + " | ".join(sets) + " |", "| --- |" + " --- |" * len(sets)]
    for n in names:
        cells = []
        for s in sets:
            r = verdicts[s]["rules"].get(n)
            if r is None:
                cells.append("–")
                continue
            (tf, tp), (hf, hp) = r["measured"], r["held_out"]
            cell = f"{'–' if tp is None else f'{tp:.2f}'} ({tf}) → {'–' if hp is None else f'{hp:.2f}'} ({hf})"
            cells.append(cell + (" demoted" if r["demoted"] else ""))
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m model.training.false_alarms", description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="*", choices=list(SOURCES), help="the sets (default: all seven)")
    ap.add_argument("--classifier", action="store_true", help="run the shipped step classifier too")
    ap.add_argument("--json", action="store_true", help="print the raw rows as JSON")
    a = ap.parse_args(argv)
    runs = load_all(sources=tuple(a.sets) if a.sets else None)
    found = collect(runs, classifier=a.classifier)
    rows, verdicts = table(found), loso_verdicts(found)
    if a.json:
        json.dump({"rows": rows, "loso": verdicts}, sys.stdout, indent=1)
        print()
    else:
        print(render(rows, verdicts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
