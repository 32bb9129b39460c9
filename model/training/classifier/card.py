"""The shipped model's card (``model/artifacts/MODEL_CARD.md``), written from the evaluation's figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LANG_NAMES = {"en": "English", "zh": "Chinese"}


def _language_gaps(metrics: dict[str, Any], margin: float = 0.02) -> list[str]:
    """One sentence per split where a language trails the best one by more than ``margin``."""
    out = []
    for split, label in (("test", "the test split"), ("heldout_families", "held-out families")):
        per = metrics[split]["per_language"]
        if len(per) < 2:
            continue
        best_lang = max(per, key=lambda k: per[k]["macro_f1"])
        for lang, v in per.items():
            gap = per[best_lang]["macro_f1"] - v["macro_f1"]
            if gap > margin:
                out.append(f"on {label} it reads **{LANG_NAMES.get(lang, lang)} worse** than "
                           f"{LANG_NAMES.get(best_lang, best_lang)} (macro-F1 {v['macro_f1']:.3f} vs "
                           f"{per[best_lang]['macro_f1']:.3f})")
    return out


def write_model_card(metrics: dict[str, Any], build: Path, path: Path) -> None:
    shipped = metrics["shipped"]
    calib_path = build / "onnx" / shipped / "calibration.json"
    info = json.loads(calib_path.read_text(encoding="utf-8")) if calib_path.exists() else {}
    sel = metrics.get("selection", {}).get("candidates", {}).get(shipped, {})
    test, held = metrics["test"], metrics["heldout_families"]
    lines = [
        f"# Model card: agent-triage failure classifier ({info.get('model_version', shipped)})", "",
        f"**Model**: {info.get('model_name', shipped)}; ONNX, dynamic int8 (per channel), "
        f"{sel.get('bytes', 0) / 1e6:.1f} MB; labels: {', '.join(info.get('labels', []))}.",
        f"Input representation `{info.get('representation', {}).get('version', '?')}` "
        f"(`model/scoring/classifier/representation.py`), at most {info.get('max_length', '?')} tokens; "
        f"temperature {info.get('temperature', 1.0):.3f}; per-label thresholds in the ONNX metadata.", "",
        "## Intended use", "",
        "Scores every step of an LLM-agent trace for the failure kinds a rule cannot see (hallucinated "
        "claims, drift off the goal, a forgotten constraint, an error answered as if it had succeeded, an "
        "unsafe or refusing answer), as one detector among the rules of `model/detectors`: its findings are "
        "fused with theirs (ARCHITECTURE.md \"Fusion\"). The real-time path scores only the newest step. "
        "It is not a safety filter on its own and not a judge of factual truth outside the trace.", "",
        "In the service the detector reports only the kinds the classifier is a producer of, and raises as "
        "failures only the kinds `gate.json` trusts (trace-level precision >= 0.8 with >= 10 positives on "
        "test and on held-out families, and no rule producing the kind too; written by the DVC stage `gate` "
        "from reports/metrics.json); every other kind is a signal: reported, never a repair trigger. The "
        "gate's current list is in `model/artifacts/gate.json`.", "",
        "## Training data", "",
        "Generated traces (`datasets/`, the seeded generator in `model/`, English and Chinese, several task "
        "families, failures injected at known steps; see `datasets/README.md`), per-step labels from that "
        "ground truth. "
        f"The model saw {info.get('train_examples', '?')} step examples sampled from the training split "
        f"(about half of them failing steps), validated on {info.get('val_examples', '?')}."
        + (f" {info.get('soft_examples')} of its examples carried the fine-tuned MiniLM teacher's soft "
           "labels (distillation)." if info.get("soft_examples") else "")
        + (f" It continued from an earlier training phase ({info['init_from']}); the phases and their "
           "sizes are in params.yaml and docs/classifier.md." if info.get("init_from") else ""), "",
        "## Metrics (reports/metrics.json, reports/eval.md)", "",
        f"- Test split ({test['traces']} traces): trace macro-F1 **{test['macro_f1']:.3f}**, step macro-F1 "
        f"{test['step_macro_f1']:.3f}.",
        f"- Held-out task families ({held['traces']} traces): macro-F1 **{held['macro_f1']:.3f}**"
        + (f" (TF-IDF baseline {held['baseline_macro_f1']:.3f})" if "baseline_macro_f1" in held else "") + ".",
        f"- Step localisation on failing test traces: exact {metrics['step_localisation']['exact']:.3f}, "
        f"within 3 steps {metrics['step_localisation']['within_3']:.3f}.",
        f"- Calibration: ECE {metrics['calibration']['ece']:.4f}"
        + (f" (before temperature {metrics['calibration']['ece_before_temperature']:.4f})"
           if "ece_before_temperature" in metrics["calibration"] else "") + ".",
        f"- int8 vs fp32 label-set agreement per step: "
        f"{metrics.get('int8_fp32_agreement', {}).get('label_set_agreement', float('nan')):.4f}.",
        f"- One-step latency p50 at export: {sel.get('p50_ms', float('nan')):.1f} ms (2 threads); "
        "see docs/benchmarks.md.", "",
        "Per language:", "",
        "| split | language | traces | macro-F1 |", "| --- | --- | --- | --- |",
    ]
    for split in ("test", "heldout_families"):
        for lang, v in metrics[split]["per_language"].items():
            lines.append(f"| {split} | {LANG_NAMES.get(lang, lang)} | {v['traces']} | {v['macro_f1']:.3f} |")
    gaps = _language_gaps(metrics)
    lines += ["", "## Limits", ""]
    if gaps:
        lines.append("- Per language: " + "; ".join(gaps) + ". Trust its verdicts there less.")
    else:
        lines.append("- No language is more than 0.02 macro-F1 behind the other on these splits; both are "
                     "generated data, so this says little about real logs in either language.")
    if "baseline_macro_f1" in held and held["baseline_macro_f1"] >= held["macro_f1"]:
        lines.append(f"- On held-out task families it does **not** beat the TF-IDF + logistic-regression baseline: "
                     f"macro-F1 {held['macro_f1']:.3f} vs {held['baseline_macro_f1']:.3f}.")
    missed = [f"{name} macro-F1 {got:.3f} < {target}" for name, got, target in
              (("test", test["macro_f1"], 0.95), ("held-out families", held["macro_f1"], 0.85)) if got < target]
    if missed:
        lines.append("- Below the project's targets (test macro-F1 ≥ 0.95, held-out families ≥ 0.85): "
                     + "; ".join(missed) + ". See reports/eval.md per kind.")
    lines.append("- On real runs (the section above, reports/real.md, `triage evaluate --real`) this classifier "
                 "raises no failure and catches almost none of the frozen semantic cases: its figures here are "
                 "on generated traces and say little about real agents.")
    low = sorted((v["f1"], k) for k, v in test["per_kind"].items() if v["support"])[:4]
    low_held = sorted((v["f1"], k, v["recall"]) for k, v in held["per_kind"].items() if v["support"])[:4]
    lines += [
        "- Weakest kinds on the test split: " + ", ".join(f"{k} (F1 {f:.2f})" for f, k in low) + ".",
        "- Weakest kinds on held-out task families: "
        + ", ".join(f"{k} (F1 {f:.2f}, recall {r:.2f})" for f, k, r in low_held) + ".",
        "- Trained on generated traces only: real agent logs are phrased differently. On the Who&When "
        "multi-agent logs it flags the code and shell commands of most runs as `unsafe_output` (a signal in "
        "the service, never a failure).",
        "- It is trained only on the kinds ARCHITECTURE.md lists it as a producer of; the technical kinds, "
        "`empty_response`, `incomplete`, `loop`, `disallowed_tool` and `degradation` are the rules' and the "
        "stream detectors' job and it does not score them.",
        f"- Text beyond {info.get('max_length', '?')} tokens is cut (the step first, then its context), so "
        "claims deep inside a very long answer can be missed.", "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    # the real-run figures lead the card (model.training.runscore.card); the synthetic ones come second
    from model.training.runscore.card import kept_real_block

    lead = kept_real_block(path)
    if lead:
        lines[0] = "## The step classifier: " + lines[0].removeprefix("# Model card: ")
    path.write_text(lead + "\n".join(lines), encoding="utf-8")


__all__ = ["write_model_card"]
