"""The real-run evaluation's report: ``reports/real.json``, the markdown tables (``reports/real.md``)
and the figures under ``reports/real-figures/`` of the report that
:func:`model.training.runscore.evaluate.evaluate_real` computes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model.scoring.runscore.features import MESSAGE_FEATURES


def _fmt_ci(d: dict[str, Any], key: str = "auroc") -> str:
    lo, hi = d["ci"]
    return f"{d[key]:.3f} [{lo:.3f}, {hi:.3f}]"


def _fmt_rate(d: dict[str, Any]) -> str:
    if d.get("rate") is None:
        return "–"
    lo, hi = d["ci"]
    return f"{100 * d['rate']:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}] ({d['hits']}/{d['n']})"


def classifier_markdown(report: dict[str, Any]) -> list[str]:
    """The step classifier's zero-shot gate: per kind, the real-run and look-alike evidence."""
    gate = report.get("classifier_gate")
    if not gate:
        return []
    dec = gate["decision"]
    alike = gate.get("lookalikes") or {"n": 0}
    lines = ["", "## Step classifier, zero-shot: which kinds may raise a failure", "",
             "A kind raises a failure only where the runs it fired on (some step at p ≥ its threshold) failed",
             f"≥ {dec['min_p_failed']:.0%} of the time over the sets with successful runs ({', '.join(gate['sets'])}),",
             f"on ≥ {dec['min_fires']} runs, and it fires on ≤ {dec['max_lookalike_rate']:.0%} of the "
             f"{alike.get('n', 0)} frozen healthy look-alikes,",
             f"besides its precision on generated traces (≥ {dec['min_precision']}, both splits) and no rule producing",
             "the kind (`model.training.classifier.gate.decide`; the DVC stage `gate` writes `gate.json` from this). "
             "Otherwise it is a signal.", "",
             "| kind | fired on real runs | P(run failed | fired) [Wilson 95 % lower] | look-alikes fired | verdict |",
             "| --- | --- | --- | --- | --- |"]
    for kind, ev in dec["evidence"].items():
        r = ev.get("real") or {}
        pf = "–" if r.get("p_failed") is None else f"{r['p_failed']:.2f} [{r['wilson_lower']:.2f}]"
        alike_s = f"{r.get('lookalikes_fired', 0)}/{r.get('lookalikes', 0)}"
        why = "failure" if kind in dec["failure_kinds"] else f"signal: {ev.get('signal_because') or r.get('signal_because', '')}"
        if ev.get("signal_because") and r.get("signal_because"):
            why = f"signal: {ev['signal_because']}; {r['signal_because']}"
        lines.append(f"| {kind} | {r.get('fired', 0)} ({r.get('failed', 0)} failed) | {pf} | {alike_s} | {why} |")
    rows = [(s, k, v) for s, kinds in report.get("classifier", {}).items() for k, v in kinds.items()]
    if rows:
        lines += ["", "Where each kind fires (before any gate), per set:", "",
                  "| set | kind | successful runs | failed runs |", "| --- | --- | --- | --- |"]
        lines += [f"| {s} | {k} | {_fmt_rate(v['fires_on_successful'])} | {_fmt_rate(v['fires_on_failed'])} |"
                  for s, k, v in rows]
    loso = {s: e["model"].get("classifier_failure_kinds", []) for s, e in report["sets"].items()}
    lines += ["", "Leave-one-source-out, each set's verdict used the gate decided without its family: "
              + ", ".join(f"{s} {', '.join(v) or 'none'}" for s, v in loso.items()) + "."]
    return lines


def zero_shot_markdown(report: dict[str, Any]) -> list[str]:
    """Issue 31's zero-shot table: AUROC with its interval, the share of runs tied at one score, ECE
    beside the ECE of predicting the training sets' base rate, and the probability's own false alarms."""
    rows = [(s, e) for s, e in report["sets"].items() if "auroc" in e]
    if not rows:
        return []
    recipe = rows[0][1]["model"].get("recipe", "?")
    lines = ["", f"## Zero-shot, leave-one-source-out (`{recipe}`)", "",
             "The recipe (`model/scoring/runscore/zeroshot.py`), the rules' measured confidences, demotions and",
             "the evidence features kept were all fitted without the held-out set's family. Ties: the largest",
             "share of the set's runs answered with one score (4 decimals, as served). Base-rate ECE: the ECE of",
             "predicting the training sets' failure rate for every run. Probability alone: successful runs whose",
             "`failure_probability` reaches the operating point; beyond the findings: of those, the ones no rule",
             "(or trusted classifier kind) flags already (the diagnosis reads the probability only without a",
             "failure). Targets (issue 31): upper bound ≥ 0.5 on every set, point ≥ 0.5 on five, mean ≥ 0.58,",
             "ties ≤ 50 %, ECE ≤ base-rate ECE, false alarms ≤ 5 %.", "",
             "| set | AUROC [95 %] | ties | ECE | base-rate ECE (rate) | ECE − base-rate ECE [95 %] | "
             "probability alone: FA | FA beyond the findings | kept features |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s, e in rows:
        c = e["calibration"]
        op = e["operating_point"]
        po = op["probability_only"]["false_alarms"]
        beyond = (op.get("probability_beyond_findings") or {}).get("false_alarms") or {}
        d = c.get("ece_vs_base_rate") or {"diff": c["ece"] - c["ece_base_rate"], "ci": [float("nan")] * 2}
        lines.append(f"| {s} | {_fmt_ci(e['auroc'])} | {100 * e['ties']:.1f} % | {c['ece']:.3f} | "
                     f"{c['ece_base_rate']:.3f} ({c['base_rate']:.3f}) | {d['diff']:+.3f} [{d['ci'][0]:+.3f}, "
                     f"{d['ci'][1]:+.3f}] | {_fmt_rate(po)} | {_fmt_rate(beyond) if beyond else '–'} | "
                     f"{', '.join(e['model']['features']) or '–'} |")
    aucs = [e["auroc"]["auroc"] for _, e in rows]
    checks = [(s, e["run_features_check"]) for s, e in rows if "run_features_check" in e]
    if checks:
        lines += ["", "The old run scorer's features (`RUN_EVIDENCE`: error and repeat shares, the final answer's",
                  "hedge and novelty, no final answer, errors passed over) offered to the same recipe as candidates,",
                  "fitted on the same training sets: they enter the shipped recipe only if they help on every set.", "",
                  "| set | AUROC with them | − recipe [95 %, paired] | kept |", "| --- | --- | --- | --- |"]
        lines += [f"| {s} | {c['auroc']:.3f} | {c['vs_recipe']['diff']:+.3f} [{c['vs_recipe']['ci'][0]:+.3f}, "
                  f"{c['vs_recipe']['ci'][1]:+.3f}] | {', '.join(c['kept']) or '–'} |" for s, c in checks]
        helped = sum(c["vs_recipe"]["diff"] > 0 for _, c in checks)
        lines += ["", f"They raise the AUROC on {helped} of {len(checks)} sets: "
                  + ("kept." if helped == len(checks) else "left out of the shipped recipe (`runscore.run_features: false`).")]
    lines += ["", f"Mean AUROC {sum(aucs) / len(aucs):.3f}; point ≥ 0.5 on {sum(a >= 0.5 for a in aucs)} of "
              f"{len(aucs)}; upper bound ≥ 0.5 on {sum(e['auroc']['ci'][1] >= 0.5 for _, e in rows)} of {len(rows)}; "
              f"ECE ≤ base-rate ECE on {sum(e['calibration']['ece'] <= e['calibration']['ece_base_rate'] for _, e in rows)}"
              f" of {len(rows)}; most ties {100 * max(e['ties'] for _, e in rows):.1f} %."]
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    lines = ["# Real runs: leave-one-source-out evaluation", "",
             "Generated by `triage evaluate --real` (DVC stage `evaluate_real`). For each set the run scorer",
             "was fitted **without** that set (features, calibration and operating point too): what a new",
             "user's unseen agent gets. Intervals: bootstrap 95 % over the set's task groups (paired for",
             "differences); rates: Wilson 95 %.", "",
             "## Did the run fail? (AUROC of `failure_probability`)", "",
             "| set | runs (failed) | ours | messages | tool calls | characters | ours − best baseline |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for s, e in report["sets"].items():
        if "auroc" not in e:
            continue
        b = e["baselines"]
        v = e["vs_best_baseline"]
        lines.append(f"| {s} | {e['runs']} ({e['failed']}) | {_fmt_ci(e['auroc'])} | {_fmt_ci(b['messages'])} | "
                     f"{_fmt_ci(b['tool calls'])} | {_fmt_ci(b['characters'])} | "
                     f"{v['diff']:+.3f} [{v['ci'][0]:+.3f}, {v['ci'][1]:+.3f}] vs {v['baseline']} |")
    lines += zero_shot_markdown(report)
    lines += ["", "## At the operating point", "",
              "`healthy` is false when a rule (or a trusted step-classifier kind) raises a failure or",
              "`failure_probability` reaches the fixed operating point (set on the training sets: at most",
              f"{100 * float(report['params'].get('target_false_alarm', 0.1)):.0f} % of each one's successful runs "
              "flagged). Target: ≤ 5 % false alarms on each unseen set.", "",
              "| set | threshold | false alarms (successful runs) | recall (failed runs) | probability alone: FA / recall | rules and trusted classifier kinds alone: FA / recall |",
              "| --- | --- | --- | --- | --- | --- |"]
    rel_lines = ["", "With the service's point relative to the agent's own runs (once it has seen 50 runs of a task",
                 "type: the upper percentile of that agent's recent `failure_probability`; here the percentile of",
                 "the set's runs of other tasks, no labels used), which zero-shot may only raise the fixed point:", "",
                 "| set | false alarms (successful runs) | recall (failed runs) |", "| --- | --- | --- |"]
    for s, e in report["sets"].items():
        if "operating_point_relative" in e:
            r = e["operating_point_relative"]
            rel_lines.append(f"| {s} | {_fmt_rate(r['false_alarms'])} | {_fmt_rate(r['recall'])} |")
    for s, e in report["sets"].items():
        if "operating_point" in e:
            op = e["operating_point"]
            po, ro = op["probability_only"], op["rules_only"]
            lines.append(f"| {s} | {op['threshold']:.3f} | {_fmt_rate(op['false_alarms'])} | {_fmt_rate(op['recall'])} | "
                         f"{_fmt_rate(po['false_alarms'])} / {_fmt_rate(po['recall'])} | "
                         f"{_fmt_rate(ro['false_alarms'])} / {_fmt_rate(ro['recall'])} |")
        elif "flagged" in e:
            lines.append(f"| {s} (all failed) | {e['model']['threshold']:.3f} | – | {_fmt_rate(e['flagged'])} | – | – |")
    lines += rel_lines
    lines += ["", "Calibration (ECE, 10 bins) of `failure_probability` on each unseen set: " + ", ".join(
        f"{s} {e['calibration']['ece']:.3f}" for s, e in report["sets"].items() if "calibration" in e)
        + " (reliability diagram: `reports/real-figures/reliability.png`).", ""]
    lines += ["## Where did it go wrong? (localisation on `source_index`, failed runs with a step label)", "",
              "| set | runs | ours exact [95 %] | ±1 | ±3 | best baseline (exact, ±3) | ours − best, exact | uniform exact | position prior exact |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s, e in report["sets"].items():
        loc = e.get("localisation")
        if not loc:
            continue
        o, b = loc["ours"], loc["baselines"][loc["best_baseline"]]
        d = loc["exact_vs_best"]
        lines.append(f"| {s} | {loc['runs']} | {o['exact']:.3f} [{loc['ours_exact_ci'][0]:.3f}, {loc['ours_exact_ci'][1]:.3f}] | "
                     f"{o['within_1']:.3f} | {o['within_3']:.3f} | {loc['best_baseline']} ({b['exact']:.3f}, {b['within_3']:.3f}) | "
                     f"{d['diff']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}] | {loc['uniform']['exact']:.3f} | "
                     f"{loc['baselines']['position prior (training folds)']['exact']:.3f} |")
    for s, e in report["sets"].items():
        ag = (e.get("localisation") or {}).get("agent")
        if ag:
            lines.append("")
            lines.append(f"Blamed agent on {s}: " + ", ".join(f"{k} {v:.3f}" for k, v in ag.items()) + ".")
    lines += classifier_markdown(report)
    lines += ["", "## Rules on real runs (a failure raised, share of runs)", "",
              "| set | rule | successful runs | failed runs | P(failed | fired) |", "| --- | --- | --- | --- | --- |"]
    for s, rules in report["rules"].items():
        for name, r in rules.items():
            pf = "–" if r["p_failed_given_fired"] is None else f"{r['p_failed_given_fired']:.2f}"
            lines.append(f"| {s} | {name} | {_fmt_rate(r['fires_on_successful'])} | {_fmt_rate(r['fires_on_failed'])} | {pf} |")
    if report.get("in_domain"):
        lines += ["", "## In domain, for comparison (folds grouped by task within the set)", "",
                  "What the scorer reaches once an agent's own labelled runs train it (not what a new user gets).", "",
                  "| set | AUROC ours | messages | ours − messages | localisation exact / ±3 |",
                  "| --- | --- | --- | --- | --- |"]
        for s, e in report["in_domain"].items():
            loc = e.get("localisation")
            loc_s = f"{loc['exact']:.3f} / {loc['within_3']:.3f}" if loc else "–"
            if "auroc" in e:
                v = e["vs_messages"]
                lines.append(f"| {s} | {_fmt_ci(e['auroc'])} | {_fmt_ci(e['messages_baseline'])} | "
                             f"{v['diff']:+.3f} [{v['ci'][0]:+.3f}, {v['ci'][1]:+.3f}] | {loc_s} |")
            else:
                lines.append(f"| {s} | – | – | – | {loc_s} |")
    if report.get("semantic"):
        lines += ["", "## Frozen semantic cases (never trained on)", "", report["semantic"]]
    lines += ["", f"Message features: {', '.join(MESSAGE_FEATURES)}.", ""]
    return "\n".join(lines)


def plot_reliability(report: dict[str, Any], path: Path) -> None:
    """One reliability diagram per set (scorer fitted without the set's family), runs per bin marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = [(s, e) for s, e in report["sets"].items() if "calibration" in e]
    cols = min(3, max(1, len(sets)))
    rows = max(1, -(-len(sets) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(sets):]:
        ax.axis("off")
    for ax, (s, e) in zip(axes.flat, sets, strict=False):
        bins = e["calibration"]["bins"]
        ax.plot([0, 1], [0, 1], "k--", lw=1)
        ax.plot([b["mean_p"] for b in bins], [b["failed_rate"] for b in bins], "o-", color="C0")
        for b in bins:  # how many runs each point stands for
            ax.annotate(str(b["n"]), (b["mean_p"], b["failed_rate"]), fontsize=7, color="C0",
                        xytext=(3, 3), textcoords="offset points")
        rate = e["failed"] / e["runs"]
        ax.axhline(rate, color="C1", lw=1, ls=":")
        ax.set_title(f"{s}: ECE {e['calibration']['ece']:.2f} (failed {rate:.0%})", fontsize=9)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("failure_probability", fontsize=8)
        ax.set_ylabel("share failed", fontsize=8)
    fig.suptitle("Reliability on unseen agents (leave-one-source-out; dotted: the set's failure rate)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_localisation(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = [s for s, e in report["sets"].items() if e.get("localisation")]
    fig, axes = plt.subplots(1, max(1, len(sets)), figsize=(4.5 * max(1, len(sets)), 3.6), squeeze=False)
    for ax, s in zip(axes[0], sets, strict=False):
        loc = report["sets"][s]["localisation"]
        rows = {"ours": loc["ours"]["exact"]}
        for name in (loc["best_baseline"], "last agent message", "position prior (training folds)"):
            rows.setdefault(name, loc["baselines"][name]["exact"])  # the best may be one of the others
        rows["uniform"] = loc["uniform"]["exact"]
        names, vals = list(rows), list(rows.values())
        ax.barh(range(len(names)), vals, color=["C0", "C1", "C2", "C3", "C7"][: len(names)])
        ax.set_yticks(range(len(names)), [n.replace(" (training folds)", "\n(training folds)") for n in names],
                      fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.set_title(f"{s}: exact localisation", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_reports(report: dict[str, Any], reports: Path, card: Path | None = None) -> list[Path]:
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "real.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (reports / "real.md").write_text(render_markdown(report), encoding="utf-8")
    figs = [reports / "real-figures" / "reliability.png", reports / "real-figures" / "localisation.png"]
    plot_reliability(report, figs[0])
    plot_localisation(report, figs[1])
    if card is not None:
        from model.training.card import write_real_block

        write_real_block(report, card)
    return [reports / "real.json", reports / "real.md", *figs]


__all__ = ["classifier_markdown", "plot_localisation", "plot_reliability", "render_markdown", "write_reports"]
