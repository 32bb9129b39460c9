"""The shipped model's card (``model/artifacts/MODEL_CARD.md``), written in two parts by two stages.

The card leads with what a new user's agent gets — the leave-one-source-out figures on real runs,
the block between :data:`START` and :data:`END`, written by ``triage evaluate --real``
(:func:`write_real_block`) — and keeps the classifier's synthetic figures second
(:func:`write_model_card`, the ``evaluate`` stage), which keeps the real-run block when it rewrites
the rest. One module for both, so neither training pipeline imports the other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

START = "<!-- real-runs:start (written by triage evaluate --real) -->"
END = "<!-- real-runs:end -->"


def real_block(report: dict[str, Any], version: str | None = None) -> str:
    """The card's lead section from a ``reports/real.json`` report."""
    lines = [START, f"# Model card: agent-triage{f' ({version})' if version else ''}", "",
             "## On real agent runs (what a new user's unseen agent gets)", "",
             "Leave-one-source-out on the real labelled sets vendored in `datasets/real/` (scorer fitted "
             "without the set it is scored on; `reports/real.md` has every figure, intervals are 95 %). "
             "Run level: AUROC of `failure_probability` beside run length; verdict: `healthy` false when a "
             "rule fires or the probability passes the operating point relative to the agent's own runs.", "",
             "| set | runs (failed) | AUROC ours | best length baseline | false alarms | recall | localisation exact (best fixed position) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for s, e in report["sets"].items():
        auroc = base = fa = rec = "–"
        if "auroc" in e:
            a, b = e["auroc"], e["vs_best_baseline"]
            auroc = f"{a['auroc']:.2f} [{a['ci'][0]:.2f}, {a['ci'][1]:.2f}]"
            base = f"{b['baseline']} {e['baselines'][b['baseline']]['auroc']:.2f}"
            op = e.get("operating_point_relative") or e["operating_point"]
            fa = f"{100 * op['false_alarms']['rate']:.0f} %"
            rec = f"{100 * op['recall']['rate']:.0f} %"
        elif "flagged" in e:
            rec = f"{100 * e['flagged']['rate']:.0f} % (fixed point)"
        loc = e.get("localisation")
        loc_s = "–"
        if loc:
            best = loc["baselines"][loc["best_baseline"]]["exact"]
            loc_s = f"{loc['ours']['exact']:.2f} ({loc['best_baseline']} {best:.2f})"
        lines.append(f"| {s} | {e['runs']} ({e['failed']}) | {auroc} | {base} | {fa} | {rec} | {loc_s} |")
    sets = report["sets"]
    beats = [s for s, e in sets.items() if "vs_best_baseline" in e and e["vs_best_baseline"]["ci"][0] > 0]
    loses = [s for s, e in sets.items() if "vs_best_baseline" in e and e["vs_best_baseline"]["ci"][0] <= 0]
    loc_beats = [s for s, e in sets.items() if e.get("localisation") and e["localisation"]["exact_vs_best"]["ci"][0] > 0]
    loc_loses = [s for s, e in sets.items() if e.get("localisation") and s not in loc_beats]
    clf = {s: r["classifier"] for s, r in report.get("rules", {}).items() if "classifier" in r}
    said = []
    if loses:
        said.append(f"On agents it was not fitted on, `failure_probability` does **not** beat the run-length "
                    f"baseline on {', '.join(loses)} (the paired interval's lower bound is at or below 0)"
                    + (f"; it does on {', '.join(beats)}" if beats else "") + ".")
    if loc_loses:
        said.append(f"Localisation does **not** beat the best fixed position on {', '.join(loc_loses)}: where "
                    "a run goes wrong sits at a different place for each of these agents.")
    said.append("The rules' false alarms on successful real runs are in `reports/real.md`; the step "
                "classifier, trained on generated traces, "
                + ("raises no failure on them." if not clf else
                   "raises failures there: " + ", ".join(f"{s} {100 * r['fires_on_successful']['rate'] if r['fires_on_successful']['rate'] is not None else 0:.0f} % of successful runs" for s, r in clf.items()) + "."))
    said.append("Run length is a baseline and never a feature: it reverses on other agents' runs.")
    lines += ["", "**Read this first.** " + " ".join(said), "", END, ""]
    return "\n".join(lines)


def write_real_block(report: dict[str, Any], path: Path, version: str | None = None) -> None:
    """Put (or replace) the real-run block at the top of the card at ``path``.

    ``report`` is ``reports/real.json`` as :func:`model.training.runscore.report.write_reports` writes it;
    ``version`` (optional) is named in the block's title. The card's other sections are kept as they are
    (a missing card is created with the block alone); a block already there is replaced, never doubled."""
    rest = path.read_text(encoding="utf-8") if path.is_file() else ""
    rest = strip_real_block(rest)
    path.write_text(real_block(report, version) + "\n" + rest, encoding="utf-8")


def strip_real_block(text: str) -> str:
    if START in text and END in text:
        head, _, tail = text.partition(START)
        _, _, tail = tail.partition(END)
        return (head + tail).lstrip("\n")
    return text


def kept_real_block(path: Path) -> str:
    """The block as it stands in the card at ``path`` ("" when none): the classifier card keeps it."""
    if not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8")
    if START not in text or END not in text:
        return ""
    return START + text.partition(START)[2].partition(END)[0] + END + "\n\n"

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
        f"**Model**: {info.get('model_name', shipped)}; ONNX, int8 weights (per channel), fp32 activations, "
        f"{sel.get('bytes', 0) / 1e6:.1f} MB; labels: {', '.join(info.get('labels', []))}.",
        f"Input representation `{info.get('representation', {}).get('version', '?')}` "
        f"(`model/scoring/classifier/representation.py`), at most {info.get('max_length', '?')} tokens; "
        f"temperature {info.get('temperature', 1.0):.3f}; per-label thresholds in the ONNX metadata.", "",
        "## Intended use", "",
        "Scores every step of an LLM-agent trace for the failure kinds a rule cannot see (hallucinated "
        "claims, drift off the goal, a forgotten constraint, an error answered as if it had succeeded, an "
        "unsafe or refusing answer), as one detector among the rules of `model/detectors`: its findings are "
        "fused with theirs (docs/architecture.md, \"Fusion\"). The real-time path scores only the newest step. "
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
        "- It is trained only on the kinds it is a producer of (docs/architecture.md, \"Failure kinds\"); the technical kinds, "
        "`empty_response`, `incomplete`, `loop`, `disallowed_tool` and `degradation` are the rules' and the "
        "stream detectors' job and it does not score them.",
        f"- Text beyond {info.get('max_length', '?')} tokens is cut (the step first, then its context), so "
        "claims deep inside a very long answer can be missed.", "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    # the real-run figures lead the card; the synthetic ones come second
    lead = kept_real_block(path)
    if lead:
        lines[0] = "## The step classifier: " + lines[0].removeprefix("# Model card: ")
    path.write_text(lead + "\n".join(lines), encoding="utf-8")


__all__ = ["write_model_card", "write_real_block"]
