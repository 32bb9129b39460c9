"""Reading the real-run evaluation run by run: what the leave-one-source-out scorer said of each
run, which runs it got wrong, and the messages around where it looked and where the label is.

:func:`loso_predictions` fits the run scorer without each set in turn (as
:func:`model.training.runscore.evaluate.evaluate_real` does) and keeps, per run, the probability, the
fixed operating point, the rules' verdict and the attributed vs the labelled message;
:func:`pick` draws a few false alarms, missed failures or misplaced attributions;
:func:`message_window` prints the messages around them; :func:`plot_rule_rates` draws where each
rule raises a failure on successful vs failed runs (``report["rules"]``).

>>> preds = loso_predictions(prepared)                              # doctest: +SKIP
>>> print(message_window(run.trace, marks={3: "attributed", 5: "labelled"}))   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from model.core.errors import InputError
from model.core.schema import Trace
from model.training.runscore.evaluate import Prepared, loso_fits

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Miss = Literal["false_alarm", "missed", "misplaced"]


@dataclass(frozen=True)
class Prediction:
    """What the scorer fitted without this run's set said of it."""

    index: int                # into the ``prepared`` list
    source: str
    run_id: str
    failed: bool
    probability: float
    threshold: float
    rule_failed: bool
    attributed: int | None    # source_index of the attributed message
    labelled: int | None      # source_index of the labelled failing message

    @property
    def flagged(self) -> bool:
        """``healthy`` false at the fixed operating point: a rule's failure or the probability."""
        return self.rule_failed or self.probability >= self.threshold


def loso_predictions(prepared: Sequence[Prepared], params: dict[str, Any] | None = None) -> list[Prediction]:
    """One :class:`Prediction` per prepared run, each from the scorer fitted without its set
    (the same fits as :func:`model.training.runscore.evaluate.evaluate_real`)."""
    out: list[Prediction] = []
    for fit in loso_fits(prepared, params):
        for i, (prob, msg) in zip(fit.test_idx, fit.scored, strict=True):
            p = prepared[i]
            units = p.example.units
            out.append(Prediction(
                i, fit.source, p.run.run_id, p.run.failed, prob, fit.scorer.threshold, bool(p.rule_failures),
                units[int(np.argmax(msg))].source_index if units else None, p.run.fail_source_index))
    out.sort(key=lambda r: r.index)
    return out


def pick(preds: Sequence[Prediction], miss: Miss, *, n: int = 3, source: str | None = None,
         seed: int = 0) -> list[Prediction]:
    """Up to ``n`` runs of one kind of miss, drawn at random (seeded).

    ``false_alarm``: a successful run flagged; ``missed``: a failed run not flagged;
    ``misplaced``: a failed run whose attributed message is not the labelled one.
    """
    if miss == "false_alarm":
        pool = [p for p in preds if not p.failed and p.flagged]
    elif miss == "missed":
        pool = [p for p in preds if p.failed and not p.flagged]
    elif miss == "misplaced":
        pool = [p for p in preds if p.failed and p.labelled is not None and p.attributed != p.labelled]
    else:
        raise InputError(f"miss must be false_alarm, missed or misplaced; got {miss!r}", path="miss")
    if source is not None:
        pool = [p for p in pool if p.source == source]
    rng = np.random.default_rng(seed)
    idx = sorted(rng.choice(len(pool), size=min(n, len(pool)), replace=False)) if pool else []
    return [pool[int(i)] for i in idx]


def message_window(trace: Trace, marks: Sequence[tuple[int | None, str]], *, radius: int = 2,
                   width: int = 240) -> str:
    """The trace's messages within ``radius`` of each marked ``source_index`` (``(index, mark)``
    pairs; ``None`` indices are left out), one line per step, texts cut to ``width`` characters;
    a marked message's lines end with ``<== its marks``. No mark: the last messages."""
    centres = [m for m, _ in marks if m is not None]
    if not centres:
        centres = [max((s.source_index for s in trace.steps), default=0)]
    keep = {i for c in centres for i in range(c - radius, c + radius + 1)}
    lines, last = [], None
    for s in trace.steps:
        if s.source_index not in keep:
            continue
        if last is not None and s.source_index > last + 1:
            lines.append("   …")
        last = s.source_index
        text = s.content or ""
        if s.tool_name and s.kind.value == "tool_call":
            text = f"{s.tool_name}({s.tool_args_raw if s.tool_args_raw is not None else s.tool_args or ''})"
        text = " ".join(text.split())
        if len(text) > width:
            text = text[: width - 1] + "…"
        who = s.speaker or ""
        here = [v for k, v in marks if k == s.source_index]
        tag = "  <== " + " + ".join(here) if here else ""
        lines.append(f"[{s.source_index:3d}] {who:>14.14} {s.kind.value:<13} {text}{tag}")
    return "\n".join(lines)


def describe(pred: Prediction, prepared: Sequence[Prepared], *, radius: int = 2, width: int = 240) -> str:
    """A miss as text: the run, its outcome, the probability against the threshold, the rules'
    failures, and the messages around the attributed and the labelled message."""
    p = prepared[pred.index]
    rules = ", ".join(f"{d}@{si}" for d, _, si in p.rule_failures) or "none"
    head = (f"{pred.run_id}  {'FAILED' if pred.failed else 'successful'}  failure_probability "
            f"{pred.probability:.3f} (threshold {pred.threshold:.3f})  rule failures: {rules}  "
            f"attributed {pred.attributed}, labelled {pred.labelled}")
    window = message_window(p.run.trace, [(pred.attributed, "attributed"), (pred.labelled, "labelled")],
                            radius=radius, width=width)
    return head + "\n" + window


def rule_table(prepared: Sequence[Prepared]) -> list[dict[str, Any]]:
    """Per set and detector: on how many successful and failed runs it raised a failure (at its
    kind's threshold) and a signal (below it)."""
    sets = list(dict.fromkeys(p.run.source for p in prepared))
    rows = []
    for s in sets:
        runs = [p for p in prepared if p.run.source == s]
        ok = [p for p in runs if not p.run.failed]
        bad = [p for p in runs if p.run.failed]
        names = sorted({d for p in runs for d, _, _ in p.rule_failures} | {d for p in runs for d, _ in p.rule_signals})
        for d in names:
            rows.append({
                "set": s, "detector": d, "successful": len(ok), "failed": len(bad),
                "failure_on_successful": sum(any(x == d for x, _, _ in p.rule_failures) for p in ok),
                "failure_on_failed": sum(any(x == d for x, _, _ in p.rule_failures) for p in bad),
                "signal_on_successful": sum(any(x == d for x, _ in p.rule_signals) for p in ok),
                "signal_on_failed": sum(any(x == d for x, _ in p.rule_signals) for p in bad),
            })
    return rows


def render_rule_table(rows: Sequence[dict[str, Any]]) -> str:
    """:func:`rule_table` as markdown: counts and shares of runs."""

    def cell(k: int, n: int) -> str:
        return "–" if n == 0 else f"{k}/{n} ({100 * k / n:.0f} %)"

    lines = ["| set | detector | failure: successful runs | failure: failed runs | signal: successful runs | "
             "signal: failed runs |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ok, bad = r["successful"], r["failed"]
        lines.append(f"| {r['set']} | {r['detector']} | {cell(r['failure_on_successful'], ok)} | "
                     f"{cell(r['failure_on_failed'], bad)} | {cell(r['signal_on_successful'], ok)} | "
                     f"{cell(r['signal_on_failed'], bad)} |")
    return "\n".join(lines)


def plot_rule_rates(report: dict[str, Any]) -> Figure:
    """Per set, the share of successful and failed runs on which each rule raised a failure
    (``report["rules"]`` of :func:`~model.training.runscore.evaluate.evaluate_real`), the 10 % line marked."""
    import matplotlib.pyplot as plt

    sets = [s for s, r in report["rules"].items() if r]
    fig, axes = plt.subplots(1, max(1, len(sets)), figsize=(4.2 * max(1, len(sets)), 3.8), squeeze=False)
    for ax, s in zip(axes[0], sets, strict=False):
        rules = report["rules"][s]
        names = sorted(rules)
        ok = [rules[n]["fires_on_successful"]["rate"] or 0.0 for n in names]
        bad = [rules[n]["fires_on_failed"]["rate"] or 0.0 for n in names]
        y = np.arange(len(names))
        ax.barh(y - 0.2, ok, height=0.4, color="C2", label="successful runs")
        ax.barh(y + 0.2, bad, height=0.4, color="C3", label="failed runs")
        ax.axvline(0.10, color="k", ls=":", lw=1)
        ax.set_yticks(y, names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, max(0.25, *ok, *bad) * 1.1)
        ax.set_title(s, fontsize=9)
        ax.set_xlabel("share of runs with a failure from the rule")
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.suptitle("Where each rule fires (dotted: the 10 % of successful runs a rule may not exceed)")
    fig.tight_layout()
    return fig


__all__ = ["Miss", "Prediction", "describe", "loso_predictions", "message_window", "pick", "plot_rule_rates",
           "render_rule_table", "rule_table"]
