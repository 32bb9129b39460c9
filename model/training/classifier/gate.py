"""Which kinds the shipped classifier may raise as *failures*; the rest it reports as signals.

A failure drives a repair; a signal is only reported (docs/architecture.md, "Fusion"). A classifier
kind whose measured precision is poor would make healthy runs look broken and send agents into
needless repairs, so the service trusts the classifier only where the evaluation says it may:

- the classifier reports only the kinds it is a producer of (``model.core.kinds.KIND_INFO``), never the
  technical kinds the rules own (a tool error the agent recovered from is the rules' call);
- among those, a kind is a *failure kind* when its trace-level precision is at least
  ``min_precision`` on the test split AND on the held-out families (``reports/metrics.json``, the
  shipped candidate) with at least ``min_support`` positive traces in each;
- and, with ``rules_first`` (the default), only when no rule produces it too: for the kinds the
  rules and the classifier share (``malformed_call``, ``refusal``, ``ignored_error``,
  ``assumption_violated``, ``unsafe_output``) a rule reads the exact shape, and the classifier's
  extra recall on paraphrases is not worth its false alarms on input unlike its training data (it
  scored a bare "hi" → "hello" exchange as a refusal at 0.74): its score there is a signal that
  corroborates or questions the rule's.

- and, zero-shot honesty (issue 20, item 7), only when the real runs bear it out: over the real sets
  with successful runs (``model.data.realdata.RUN_LEVEL_SOURCES``), the runs on which the kind fired
  (some step at ``p ≥`` its threshold) failed at least ``min_p_failed`` of the time, on at least
  ``min_fires`` runs (the Wilson 95 % lower bound is reported beside it), and it fires on at most
  ``max_lookalike_rate`` of the frozen healthy look-alikes (``datasets/semantic/cases.jsonl``).
  The evidence comes from ``triage evaluate --real`` (``reports/real.json``, ``classifier_gate``),
  which also applies this gate leave-one-source-out, each held-out family judged by a gate decided
  on the other sets only. Without real evidence no kind passes.

Every other kind is capped below the failure threshold (a signal).

``python -m model.training.classifier.gate`` writes ``model/artifacts/gate.json`` from the report (the DVC
stage ``gate``); :mod:`model.scoring.classifier.gate` reads it, for
:class:`~model.detectors.classifier.ClassifierDetector`.

>>> figures = {"precision": 0.9, "support": 20}
>>> decide({"test": {"refusal": figures, "off_topic": figures},
...         "heldout_families": {"refusal": figures, "off_topic": figures}},
...        real={"off_topic": {"fired": 25, "failed": 24}}, lookalikes={"n": 60, "fired": {"off_topic": 3}}
...        )["failure_kinds"]
['off_topic']
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from model.core.kinds import KIND_INFO, Producer
from model.scoring.classifier.gate import GATE_FILE, REPORTED_KINDS
from model.training.semantic import wilson

SPLITS = ("test", "heldout_families")


#: Zero-shot bar on the real runs (issue 20, item 7).
MIN_P_FAILED = 0.9
MIN_FIRES = 20
MAX_LOOKALIKE_RATE = 0.1


def real_check(
    kind: str, real: dict[str, dict[str, int]] | None, lookalikes: dict[str, Any] | None, *,
    min_p_failed: float = MIN_P_FAILED, min_fires: int = MIN_FIRES, max_lookalike_rate: float = MAX_LOOKALIKE_RATE,
) -> tuple[bool, dict[str, Any]]:
    """Whether ``kind`` meets the zero-shot bar on real runs, and the figures that say so.

    ``real``: kind → ``{"fired": runs it fired on, "failed": of those, the failed ones}`` over the
    real sets with successful runs; ``lookalikes``: ``{"n": look-alike cases, "fired": kind → cases
    it fired on}``.
    """
    row = (real or {}).get(kind) or {"fired": 0, "failed": 0}
    fired, failed = int(row["fired"]), int(row["failed"])
    n_alike = int((lookalikes or {}).get("n", 0))
    alike = int(((lookalikes or {}).get("fired") or {}).get(kind, 0))
    p = failed / fired if fired else None
    lo = round(wilson(failed, fired, z=1.96)[0], 4) if fired else None
    alike_rate = alike / n_alike if n_alike else None
    reasons = []
    if real is None:
        reasons.append("no real-run evidence")
    elif fired < min_fires:
        reasons.append(f"fired on {fired} real runs (< {min_fires})")
    elif p is not None and p < min_p_failed:
        reasons.append(f"P(run failed | fired) {p:.2f} < {min_p_failed}")
    if alike_rate is None:
        reasons.append("no look-alike evidence")
    elif alike_rate > max_lookalike_rate:
        reasons.append(f"fires on {alike_rate:.0%} of the look-alikes (> {max_lookalike_rate:.0%})")
    figures: dict[str, Any] = {"fired": fired, "failed": failed, "p_failed": None if p is None else round(p, 4),
                               "wilson_lower": lo, "lookalikes_fired": alike, "lookalikes": n_alike}
    if reasons:
        figures["signal_because"] = "; ".join(reasons)
    return not reasons, figures


def decide(
    per_kind: dict[str, dict[str, dict[str, float]]], *, min_precision: float = 0.8, min_support: int = 10,
    rules_first: bool = True, real: dict[str, dict[str, int]] | None = None, lookalikes: dict[str, Any] | None = None,
    min_p_failed: float = MIN_P_FAILED, min_fires: int = MIN_FIRES, max_lookalike_rate: float = MAX_LOOKALIKE_RATE,
) -> dict[str, Any]:
    """The gate from per-split, per-kind ``{"precision", "support"}`` figures on generated traces
    and the real-run evidence (:func:`real_check`)."""
    failure_kinds: list[str] = []
    evidence: dict[str, dict[str, Any]] = {}
    for kind in REPORTED_KINDS:
        rows = {split: per_kind.get(split, {}).get(kind.value) for split in SPLITS}
        ok = all(
            r is not None and r.get("precision", 0.0) >= min_precision and r.get("support", 0) >= min_support
            for r in rows.values()
        )
        evidence[kind.value] = {
            split: None if r is None else {"precision": r.get("precision"), "support": r.get("support")}
            for split, r in rows.items()
        }
        if rules_first and Producer.RULES in KIND_INFO[kind].producers:
            evidence[kind.value]["signal_because"] = "a rule produces this kind too (rules_first)"
            ok = False
        real_ok, figures = real_check(kind.value, real, lookalikes, min_p_failed=min_p_failed,
                                      min_fires=min_fires, max_lookalike_rate=max_lookalike_rate)
        evidence[kind.value]["real"] = figures
        ok = ok and real_ok
        if ok:
            failure_kinds.append(kind.value)
    return {
        "reported_kinds": [k.value for k in REPORTED_KINDS],
        "failure_kinds": failure_kinds,
        "min_precision": min_precision,
        "min_support": min_support,
        "rules_first": rules_first,
        "min_p_failed": min_p_failed,
        "min_fires": min_fires,
        "max_lookalike_rate": max_lookalike_rate,
        "evidence": evidence,
    }


def per_kind_from_metrics(metrics: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """The shipped candidate's trace-level per-kind figures of each split in ``metrics.json``."""
    cand = metrics.get("candidates", {}).get(metrics.get("shipped"), {})
    return {split: cand.get(split, {}).get("per_kind", {}) for split in SPLITS}


def gate_from_metrics(metrics: dict[str, Any], real_report: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """:func:`decide` on the shipped candidate's figures in ``metrics.json`` and the real-run evidence
    of ``reports/real.json`` (its ``classifier_gate`` section; ``None``: none, no kind passes)."""
    shipped = metrics.get("shipped")
    ev = (real_report or {}).get("classifier_gate") or {}
    out = decide(per_kind_from_metrics(metrics), real=ev.get("real"), lookalikes=ev.get("lookalikes"), **kw)
    out["model"] = shipped
    out["metrics_generated_at"] = metrics.get("generated_at")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--metrics", type=Path, default=Path("reports/metrics.json"))
    ap.add_argument("--real", type=Path, default=Path("reports/real.json"),
                    help="triage evaluate --real's report: the real-run evidence of each kind")
    ap.add_argument("--out", type=Path, default=Path("model/artifacts") / GATE_FILE)
    ap.add_argument("--min-precision", type=float, default=0.8)
    ap.add_argument("--min-support", type=int, default=10)
    args = ap.parse_args(argv)
    try:
        metrics = json.loads(args.metrics.read_text(encoding="utf-8"))
        real = json.loads(args.real.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"error: cannot read {exc}") from None
    if "classifier_gate" not in real:
        raise SystemExit(f"error: {args.real} has no classifier_gate section (run triage evaluate --real)")
    gate = gate_from_metrics(metrics, real, min_precision=args.min_precision, min_support=args.min_support)
    args.out.write_text(json.dumps(gate, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: failures from {gate['failure_kinds'] or 'no kind'}; "
          f"signals only for the other {len(gate['reported_kinds']) - len(gate['failure_kinds'])} kinds")


if __name__ == "__main__":
    main()
