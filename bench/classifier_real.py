"""Two step-classifier artefacts compared on the real runs and the frozen semantic cases.

The classifier is trained on generated traces only, so every real set (``model.data.realdata``:
τ-bench airline, AgentProcessBench HotpotQA, mini-SWE-agent, Who&When) and the semantic cases
(``datasets/semantic/cases.jsonl``) are unseen by it. The classifier is read **alone** (no rules, no
run scorer), over the kinds it reports (``model.scoring.classifier.gate.REPORTED_KINDS``):

* a step's confidence is ``relative_confidence(p, t)`` of its most confident kind (the detector's
  mapping: the kind's threshold lands on 0.5), the run's score the highest over its steps;
* **AUROC** of that run score, failed vs successful runs (sets with both);
* **raises**: some step passes its kind's threshold (``p ≥ t``), on successful runs (false alarms)
  and on failed runs; *as served*: only the kinds the artefact's ``gate.json`` trusts as failures;
* **exact**: the top step's ``source_index`` equals the label's, on failed runs with a step label;
* semantic cases: **caught at index** (a step at the expected ``source_index`` passes its kind's
  threshold), **false alarms** (a healthy look-alike has a step that passes one).

Intervals: bootstrap over task groups (``model.core.metrics.group_bootstrap``, 1,000 resamples,
the same resamples for both models, so differences are paired); semantic cases resample case
pairs (a failing case with its look-alikes).

Two steps, because one code base builds one representation version and an artefact of another
version is refused: ``score`` runs one artefact with the code at ``--code`` (default: this
checkout) and writes its per-run records; ``compare`` prints the table of two such files::

    .venv/bin/python bench/classifier_real.py score --artifacts model/artifacts --out /tmp/new.json
    git worktree add /tmp/old <commit>     # the commit the other artefact shipped in
    .venv/bin/python bench/classifier_real.py score --code /tmp/old --artifacts /tmp/old/model/artifacts \\
        --out /tmp/old.json
    .venv/bin/python bench/classifier_real.py compare /tmp/old.json /tmp/new.json

``pieces`` needs no model: for the code at ``--code``, the share of agent steps (and of runs) of each
set whose grounding line carries each piece (``constraint missing``, ``limit broken`` … for
``rep-v3``), on successful and failed runs apart — a cue that fires as often on successful real runs
as on failed ones says nothing there::

    .venv/bin/python bench/classifier_real.py pieces --code /tmp/old --limit-groups 25
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SETS = ("tau_airline", "agentprocessbench", "swe", "whowhen")


def _import_path(code: Path) -> None:
    sys.path.insert(0, str(code.resolve()))
    for name in [m for m in sys.modules if m == "model" or m.startswith("model.")]:
        del sys.modules[name]


def _run_record(rt: Any, trace: Any, reported: Sequence[str], trusted: frozenset[str]) -> dict[str, Any]:
    """The classifier's reading of one trace: top step and the kinds that pass their thresholds."""
    from model.detectors.classifier import relative_confidence

    cols = [j for j, label in enumerate(rt.labels) if label in reported]
    start = max(0, len(trace.steps) - 512)  # as the detector (max_steps)
    probs = rt.score_trace(trace, start=start) if len(trace.steps) else np.zeros((0, len(rt.labels)))
    top, top_si, top_kind = 0.0, None, None
    raised: dict[str, int | None] = {}
    for row in range(probs.shape[0]):
        step = trace.steps[start + row]
        for j in cols:
            p, t = float(probs[row, j]), float(rt.thresholds[j])
            c = relative_confidence(p, t)
            if c > top:
                top, top_si, top_kind = c, step.source_index, rt.labels[j]
            if p >= t and rt.labels[j] not in raised:
                raised[rt.labels[j]] = step.source_index
    # every source_index at which some kind passes its threshold (semantic cases: caught at index)
    at = sorted({trace.steps[start + r].source_index for r in range(probs.shape[0]) for j in cols
                 if probs[r, j] >= rt.thresholds[j] and trace.steps[start + r].source_index is not None})
    return {"top": round(top, 5), "top_source_index": top_si, "top_kind": top_kind, "raised": raised,
            "raised_served": any(k in trusted for k in raised), "raised_at": at, "steps": len(trace.steps)}


def score(artifacts: Path, out: Path, *, threads: int, limit_groups: int | None) -> None:
    from model.data.realdata import first_groups, load_source
    from model.importers import load_trace
    from model.scoring.classifier.gate import GATE_FILE, REPORTED_KINDS
    from model.scoring.classifier.runtime import ClassifierRuntime
    from model.training.semantic import load_cases

    rt = ClassifierRuntime.load(artifacts, threads=threads)
    gate_path = artifacts / GATE_FILE
    gate = json.loads(gate_path.read_text(encoding="utf-8")) if gate_path.is_file() else None
    reported = [k.value for k in REPORTED_KINDS]
    trusted = frozenset(gate["failure_kinds"] if gate else reported)
    digest = hashlib.sha256((artifacts / "classifier.onnx").read_bytes()).hexdigest()[:16]
    runs: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for source in SETS:
        loaded = load_source(source)
        if limit_groups:
            loaded = first_groups(loaded, limit_groups)
        for r in loaded:
            labelled = [f.source_index for f in r.trace.labels.failures if f.source_index is not None]
            rec = {"source": source, "run_id": r.run_id, "group": r.group, "failed": bool(r.failed),
                   "label_source_index": labelled[0] if labelled else None}
            runs.append(rec | _run_record(rt, r.trace, reported, trusted))
        print(f"{source}: {len(loaded)} runs scored ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    cases = []
    for case in load_cases():
        rec = {"id": case.id, "language": case.language, "group": case.group, "lookalike_of": case.lookalike_of,
               "expected_source_index": case.expected_source_index}
        cases.append(rec | _run_record(rt, load_trace(case.trace), reported, trusted))
    meta = {"model_version": rt.meta.model_version, "model_name": rt.meta.model_name,
            "representation": rt.meta.representation.version, "onnx_sha256": digest,
            "failure_kinds": sorted(trusted), "thresholds": dict(zip(rt.labels, map(float, rt.thresholds), strict=True)),
            "seconds": round(time.perf_counter() - t0, 1)}
    out.write_text(json.dumps({"meta": meta, "runs": runs, "cases": cases}, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {out}: {len(runs)} runs, {len(cases)} semantic cases, {meta['seconds']} s", file=sys.stderr)


_COUNTED = ("none", "one", "two", "three", "many")


def piece_name(piece: str) -> str:
    """A grounding-line piece without its values: ``new figures one: 27`` → ``new figures ≥1``,
    ``goal terms none of two`` → ``goal terms none``."""
    words = piece.split(":")[0].split()
    for i, w in enumerate(words):
        if w in _COUNTED:
            return " ".join([*words[:i], "none" if w == "none" else "≥1"])
    return " ".join(words)


def pieces(limit_groups: int | None) -> str:
    from collections import Counter

    from model.data.realdata import first_groups, load_source
    from model.scoring.classifier.representation import REPRESENTATION_VERSION, trace_texts

    lines = [f"Grounding-line pieces of `{REPRESENTATION_VERSION}` on real agent steps: share of steps / of runs",
             "", "| set | runs | agent steps | piece: steps / runs |", "| --- | --- | --- | --- |"]
    for source in SETS:
        loaded = load_source(source)
        if limit_groups:
            loaded = first_groups(loaded, limit_groups)
        for failed in (False, True):
            chosen = [r for r in loaded if bool(r.failed) == failed]
            if not chosen:
                continue
            steps, per_step, per_run = 0, Counter[str](), Counter[str]()
            for r in chosen:
                seen: set[str] = set()
                for text in trace_texts(r.trace):
                    rows = text.splitlines()
                    if len(rows) < 2 or not rows[1].startswith("[grounding] "):
                        continue
                    steps += 1
                    names = {piece_name(x) for x in rows[1].removeprefix("[grounding] ").split(" · ")}
                    per_step.update(names)
                    seen |= names
                per_run.update(seen)
            cells = ", ".join(f"{k} {per_step[k] / steps:.0%} / {per_run[k] / len(chosen):.0%}"
                              for k in sorted(per_step, key=lambda k: -per_step[k]) if not k.startswith("after"))
            lines.append(f"| {source} {'failed' if failed else 'successful'} | {len(chosen)} | {steps} | {cells} |")
    return "\n".join(lines)


# ---- compare --------------------------------------------------------------------------------------


def _mean(x: np.ndarray, idx: np.ndarray) -> float:
    return float(x[idx].mean()) if len(idx) else float("nan")


def _rate_row(a: np.ndarray, b: np.ndarray, mask: np.ndarray, boots: list[np.ndarray]) -> str:
    """``a → b (Δ [95 %])`` for two 0/1 arrays over the rows in ``mask``, paired over ``boots``."""
    from model.core.metrics import percentile_interval

    if not mask.any():
        return "–"
    rows = np.flatnonzero(mask)
    diffs = []
    for bt in boots:
        sel = bt[mask[bt]]
        diffs.append(_mean(b, sel) - _mean(a, sel))
    lo, hi = percentile_interval(diffs)
    ra, rb = a[rows].mean(), b[rows].mean()
    return f"{ra:.1%} → {rb:.1%} ({rb - ra:+.1%} [{lo:+.1%}, {hi:+.1%}])"


def compare(old: dict[str, Any], new: dict[str, Any], *, seed: int = 0) -> str:
    """The markdown tables of ``old`` vs ``new`` (records written by :func:`score`)."""
    from model.core.metrics import auroc, group_bootstrap, percentile_interval

    ma, mb = old["meta"], new["meta"]
    key = {(r["source"], r["run_id"]): r for r in new["runs"]}
    pairs = [(r, key[(r["source"], r["run_id"])]) for r in old["runs"] if (r["source"], r["run_id"]) in key]
    lines = [f"A = `{ma['model_version']}` (`{ma['representation']}`, onnx {ma['onnx_sha256']}, served failure kinds "
             f"{', '.join(ma['failure_kinds']) or 'none'}); B = `{mb['model_version']}` (`{mb['representation']}`, "
             f"onnx {mb['onnx_sha256']}, served failure kinds {', '.join(mb['failure_kinds']) or 'none'}). "
             "Intervals: 1,000 bootstrap resamples of task groups, paired.", "",
             "| set | runs (failed) | AUROC A → B (Δ [95 %]) | raises on successful runs A → B | raises on failed runs "
             "A → B | as served, on successful runs A → B | exact top step, failed runs with a label A → B |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for source in SETS:
        ps = [(a, b) for a, b in pairs if a["source"] == source]
        if not ps:
            continue
        y = np.array([a["failed"] for a, _ in ps], dtype=int)
        sa = np.array([a["top"] for a, _ in ps])
        sb = np.array([b["top"] for _, b in ps])
        groups = [a["group"] for a, _ in ps]
        boots = group_bootstrap(groups, seed).resamples(groups)
        if 0 < y.sum() < len(y):
            d = [auroc(y[bt], sb[bt]) - auroc(y[bt], sa[bt]) for bt in boots]
            lo, hi = percentile_interval(d)
            auc = f"{auroc(y, sa):.3f} → {auroc(y, sb):.3f} ({auroc(y, sb) - auroc(y, sa):+.3f} [{lo:+.3f}, {hi:+.3f}])"
        else:
            auc = "– (all failed)"
        ra = np.array([bool(a["raised"]) for a, _ in ps], dtype=float)
        rb = np.array([bool(b["raised"]) for _, b in ps], dtype=float)
        va = np.array([a["raised_served"] for a, _ in ps], dtype=float)
        vb = np.array([b["raised_served"] for _, b in ps], dtype=float)
        lab = np.array([a["failed"] and a["label_source_index"] is not None for a, _ in ps])
        ea = np.array([a["top_source_index"] == a["label_source_index"] for a, _ in ps], dtype=float)
        eb = np.array([b["top_source_index"] == b["label_source_index"] for _, b in ps], dtype=float)
        ok, bad = y == 0, y == 1
        lines.append(f"| {source} | {len(ps)} ({int(y.sum())}) | {auc} | {_rate_row(ra, rb, ok, boots)} | "
                     f"{_rate_row(ra, rb, bad, boots)} | {_rate_row(va, vb, ok, boots)} | {_rate_row(ea, eb, lab, boots)} |")
    # which kinds raise on successful runs
    lines += ["", "Kinds that pass their threshold on successful runs (share of the set's successful runs):", "",
              "| set | A | B |", "| --- | --- | --- |"]
    for source in SETS:
        ok_runs = [(a, b) for a, b in pairs if a["source"] == source and not a["failed"]]
        if not ok_runs:
            continue
        cells = []
        for side in (0, 1):
            counts: dict[str, int] = {}
            for pr in ok_runs:
                for k in pr[side]["raised"]:
                    counts[k] = counts.get(k, 0) + 1
            cells.append(", ".join(f"{k} {v / len(ok_runs):.1%}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
                         or "none")
        lines.append(f"| {source} | {cells[0]} | {cells[1]} |")
    # semantic cases
    ckey = {c["id"]: c for c in new["cases"]}
    cpairs = [(c, ckey[c["id"]]) for c in old["cases"] if c["id"] in ckey]
    family = [c["lookalike_of"] or c["id"] for c, _ in cpairs]
    boots = group_bootstrap(family, seed).resamples(family)
    failing = np.array([c["lookalike_of"] is None for c, _ in cpairs])
    lines += ["", "Semantic cases (never trained on): caught = a step at the expected `source_index` passes its "
              "kind's threshold; false alarm = a look-alike has a step that passes one.", "",
              "| cases | n | caught at index A → B | false alarms on look-alikes A → B |", "| --- | --- | --- | --- |"]
    for lang in ("all", "en", "zh"):
        sel = np.array([lang == "all" or c["language"] == lang for c, _ in cpairs])
        ca = np.array([c["expected_source_index"] in c["raised_at"] for c, _ in cpairs], dtype=float)
        cb = np.array([c["expected_source_index"] in d["raised_at"] for c, d in cpairs], dtype=float)
        fa = np.array([bool(c["raised"]) for c, _ in cpairs], dtype=float)
        fb = np.array([bool(d["raised"]) for _, d in cpairs], dtype=float)
        lines.append(f"| {lang} | {int((sel & failing).sum())} failing, {int((sel & ~failing).sum())} look-alikes | "
                     f"{_rate_row(ca, cb, sel & failing, boots)} | {_rate_row(fa, fb, sel & ~failing, boots)} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score", help="score one artefact on the real runs and semantic cases")
    s.add_argument("--artifacts", type=Path, default=ROOT / "model" / "artifacts")
    s.add_argument("--code", type=Path, default=ROOT, help="checkout whose model/ scores (default: this one)")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--limit-groups", type=int, default=None, help="the first N task groups of each set only")
    pc = sub.add_parser("pieces", help="how often each grounding-line piece appears on real agent steps")
    pc.add_argument("--code", type=Path, default=ROOT, help="checkout whose representation is read")
    pc.add_argument("--limit-groups", type=int, default=None)
    c = sub.add_parser("compare", help="print the table of two score files (A → B)")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    c.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.cmd == "score":
        _import_path(args.code)
        score(args.artifacts.resolve(), args.out, threads=args.threads, limit_groups=args.limit_groups)
    elif args.cmd == "pieces":
        _import_path(args.code)
        print(pieces(args.limit_groups))
    else:
        _import_path(ROOT)
        print(compare(json.loads(args.old.read_text(encoding="utf-8")), json.loads(args.new.read_text(encoding="utf-8"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
