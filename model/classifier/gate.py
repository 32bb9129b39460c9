"""Which kinds the shipped classifier may raise as *failures*; the rest it reports as signals.

A failure drives a repair; a signal is only reported (ARCHITECTURE.md "Fusion"). A classifier
kind whose measured precision is poor would make healthy runs look broken and send agents into
needless repairs, so the service trusts the classifier only where the evaluation says it may:

- the classifier reports only the kinds it is a producer of (``model.kinds.KIND_INFO``), never the
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

Every other kind is capped below the failure threshold (a signal).

``python -m model.classifier.gate`` writes ``model/artifacts/gate.json`` from the report (the DVC
stage ``gate``); :class:`~model.classifier.detector.ClassifierDetector` reads it.

>>> figures = {"precision": 0.9, "support": 20}
>>> decide({"test": {"refusal": figures, "off_topic": figures},
...         "heldout_families": {"refusal": figures, "off_topic": figures}})["failure_kinds"]
['off_topic']
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from model.kinds import KIND_INFO, FailureKind, Producer

GATE_FILE = "gate.json"
SPLITS = ("test", "heldout_families")

#: Kinds the classifier may report at all: those ARCHITECTURE.md lists it as a producer of.
REPORTED_KINDS: tuple[FailureKind, ...] = tuple(
    k for k, info in KIND_INFO.items() if Producer.CLASSIFIER in info.producers
)


def decide(
    per_kind: dict[str, dict[str, dict[str, float]]], *, min_precision: float = 0.8, min_support: int = 10,
    rules_first: bool = True,
) -> dict[str, Any]:
    """The gate from per-split, per-kind ``{"precision", "support"}`` figures."""
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
        if ok:
            failure_kinds.append(kind.value)
    return {
        "reported_kinds": [k.value for k in REPORTED_KINDS],
        "failure_kinds": failure_kinds,
        "min_precision": min_precision,
        "min_support": min_support,
        "rules_first": rules_first,
        "evidence": evidence,
    }


def gate_from_metrics(metrics: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """:func:`decide` on the shipped candidate's trace-level per-kind figures in ``metrics.json``."""
    shipped = metrics.get("shipped")
    cand = metrics.get("candidates", {}).get(shipped, {})
    per_kind = {split: cand.get(split, {}).get("per_kind", {}) for split in SPLITS}
    out = decide(per_kind, **kw)
    out["model"] = shipped
    out["metrics_generated_at"] = metrics.get("generated_at")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--metrics", type=Path, default=Path("reports/metrics.json"))
    ap.add_argument("--out", type=Path, default=Path("model/artifacts") / GATE_FILE)
    ap.add_argument("--min-precision", type=float, default=0.8)
    ap.add_argument("--min-support", type=int, default=10)
    args = ap.parse_args(argv)
    try:
        metrics = json.loads(args.metrics.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"error: cannot read {args.metrics}: {exc}") from None
    gate = gate_from_metrics(metrics, min_precision=args.min_precision, min_support=args.min_support)
    args.out.write_text(json.dumps(gate, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: failures from {gate['failure_kinds'] or 'no kind'}; "
          f"signals only for the other {len(gate['reported_kinds']) - len(gate['failure_kinds'])} kinds")


if __name__ == "__main__":
    main()
