"""The model card's lead section: the real-run figures (``triage evaluate --real`` writes it).

The card (``model/artifacts/MODEL_CARD.md``) leads with what a new user's agent gets — the
leave-one-source-out figures on real runs — and keeps the classifier's synthetic figures
(:mod:`model.training.classifier.card`) second. The block between :data:`START` and :data:`END` is this
module's; the classifier's card writer keeps it when it rewrites the rest.
"""

from __future__ import annotations

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
    """Put (or replace) the real-run block at the top of the card at ``path``."""
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


__all__ = ["END", "START", "kept_real_block", "real_block", "strip_real_block", "write_real_block"]
