"""What a tenant's failure history says: the figures of ``research/03-failure-history.ipynb``.

Every function reads the records of :meth:`serve.store.labels.LabelStore.iter_history` (a trace with its
stored diagnosis, recommendations, outcomes and labels) and returns plain data; the notebook only
plots and prints them.

* :func:`runs` — one :class:`Run` per trace: when it ran (its first step's timestamp, else when it
  was stored), the failure kinds of its diagnosis, its effective label.
* :func:`spectrum` — traces with each failure kind per week; :func:`cooccurrence` — traces with both
  kinds of a pair.
* :func:`efficacy` — per repair strategy: outcomes reported (calls), share that worked (Wilson 95 %
  interval), mean and median time, mean cost; :func:`efficacy_markdown` prints it as a table.
* :func:`recoveries` / :func:`time_to_recovery` — per diagnosed failure that got recommendations:
  whether an outcome reported it fixed, after how many rungs, in how much repair time (the sum of
  its outcomes' ``duration_s`` up to the first success), whether it reached ``human_handoff``.
* :func:`load_learning_curves` — each set's learning curve of the agent model beside the cheap
  learners, from ``reports/learning.json`` (``triage evaluate --learning-curve``), or ``None`` when it
  is absent.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from model.core.errors import InputError
from model.core.kinds import FailureKind
from model.training.semantic import wilson
from serve.services.run_labels import effective_label

_KIND_ORDER = {k.value: i for i, k in enumerate(FailureKind)}


@dataclass(frozen=True)
class Run:
    trace_id: str
    at: datetime
    kinds: tuple[str, ...]  # failure kinds of the stored diagnosis, in the enum's order
    signals: tuple[str, ...]  # its signals' kinds not among its failures (below threshold, or handled)
    detectors: tuple[str, ...]  # the detectors behind its failures (``runscore``: the run scorer's verdict)
    primary: str | None
    failure_probability: float | None
    label: bool | None  # the effective label's ``failed`` (None: no label)
    label_source: str | None  # "human", "checker", or "outcome" (a human label posted with an outcome)


def _sorted(kinds: Iterable[str]) -> list[str]:
    return sorted(kinds, key=lambda k: (_KIND_ORDER.get(k, 99), k))


def _found(r: Run, include_signals: bool) -> tuple[str, ...]:
    return tuple(_sorted(r.kinds + r.signals)) if include_signals else r.kinds


_OF = ("failures", "signals", "both")


def _at(record: dict[str, Any]) -> datetime:
    for step in record["trace"].get("steps") or []:
        ts = step.get("timestamp")
        if ts:
            return datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
    created: datetime = record["created_at"]
    return created


def runs(records: Iterable[dict[str, Any]]) -> list[Run]:
    """One :class:`Run` per record, in order of time."""
    out = []
    for r in records:
        resp = r["response"] or {}
        kinds = _sorted({str(f["kind"]) for f in resp.get("failures") or []})
        signals = _sorted({str(f["kind"]) for f in resp.get("signals") or []} - set(kinds))
        eff = effective_label(r["labels"])
        source = None
        if eff is not None:
            source = "outcome" if eff.author == "outcome" else eff.author_type
        primary = (resp.get("primary") or {}).get("kind")
        detectors = sorted({str(d) for f in resp.get("failures") or [] for d in (f.get("detectors") or [f.get("detector")])
                            if d})
        out.append(Run(str(r["trace"]["id"]), _at(r), tuple(kinds), tuple(signals), tuple(detectors), primary, resp.get("failure_probability"),
                       None if eff is None else eff.failed, source))
    out.sort(key=lambda x: (x.at, x.trace_id))
    return out


@dataclass(frozen=True)
class Spectrum:
    weeks: list[date]  # the Monday of each week, every week from the first run's to the last's
    kinds: list[str]
    counts: list[list[int]]  # counts[w][k]: traces of week w with kind k among their failures
    runs: list[int]  # traces per week


def spectrum(rs: list[Run], *, of: str = "failures") -> Spectrum:
    """Traces per ISO week and failure kind (a trace with two kinds counts in both), of their
    ``failures``, of the kinds found only as ``signals``, or ``both``."""
    if of not in _OF:
        raise InputError(f"expected one of {', '.join(_OF)}, got {of!r}", path="of")

    def found(r: Run) -> tuple[str, ...]:
        return r.signals if of == "signals" else _found(r, of == "both")

    if not rs:
        return Spectrum([], [], [], [])
    monday = [(r.at.date() - timedelta(days=r.at.weekday())) for r in rs]
    weeks = [min(monday) + timedelta(weeks=i) for i in range((max(monday) - min(monday)).days // 7 + 1)]
    kinds = _sorted({k for r in rs for k in found(r)})
    index = {w: i for i, w in enumerate(weeks)}
    counts = [[0] * len(kinds) for _ in weeks]
    per_week = [0] * len(weeks)
    for r, m in zip(rs, monday, strict=True):
        per_week[index[m]] += 1
        for k in found(r):
            counts[index[m]][kinds.index(k)] += 1
    return Spectrum(weeks, kinds, counts, per_week)


@dataclass(frozen=True)
class Cooccurrence:
    kinds: list[str]
    matrix: list[list[int]]  # matrix[i][j]: traces with both kinds; the diagonal: traces with kind i


def cooccurrence(rs: list[Run], *, include_signals: bool = False) -> Cooccurrence:
    """Traces with both kinds of each pair (the diagonal: with the kind), from their failures (and
    signals, with ``include_signals``)."""
    kinds = _sorted({k for r in rs for k in _found(r, include_signals)})
    m = [[0] * len(kinds) for _ in kinds]
    for r in rs:
        idx = [kinds.index(k) for k in _found(r, include_signals)]
        for i in idx:
            for j in idx:
                m[i][j] += 1
    return Cooccurrence(kinds, m)


@dataclass(frozen=True)
class StrategyEfficacy:
    strategy: str
    calls: int  # outcomes reported
    successes: int
    rate: float
    ci: tuple[float, float]
    mean_s: float | None
    median_s: float | None
    mean_cost: float | None


def efficacy(records: Iterable[dict[str, Any]]) -> list[StrategyEfficacy]:
    """Per strategy, from the outcomes reported (most called first)."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        for o in r["outcomes"]:
            by[str(o["strategy"])].append(o)
    out = []
    for name, os_ in by.items():
        k = sum(1 for o in os_ if o["success"])
        secs = [float(o["duration_s"]) for o in os_ if o.get("duration_s") is not None]
        costs = [float(o["cost"]) for o in os_ if o.get("cost") is not None]
        out.append(StrategyEfficacy(
            name, len(os_), k, k / len(os_), wilson(k, len(os_)),
            statistics.fmean(secs) if secs else None, statistics.median(secs) if secs else None,
            statistics.fmean(costs) if costs else None))
    out.sort(key=lambda e: (-e.calls, e.strategy))
    return out


def efficacy_markdown(rows: list[StrategyEfficacy]) -> str:
    """The efficacy table as Markdown (strategy, calls, success rate with its interval, times, cost)."""
    lines = ["| strategy | calls | worked | success rate (95 % CI) | mean time (s) | median time (s) | mean cost |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: |"]

    def num(x: float | None, fmt: str) -> str:
        return "–" if x is None else format(x, fmt)

    for e in rows:
        lines.append(f"| {e.strategy} | {e.calls} | {e.successes} | {e.rate:.0%} ({e.ci[0]:.0%}–{e.ci[1]:.0%}) | "
                     f"{num(e.mean_s, '.1f')} | {num(e.median_s, '.1f')} | {num(e.mean_cost, '.4f')} |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Recovery:
    trace_id: str
    at: datetime
    kind: str
    recommendations: int
    outcomes: int
    recovered: bool
    repair_s: float | None  # repair time up to the first success (None: not recovered)
    handed_off: bool  # a human_handoff was recommended
    fixed_by: str | None  # the strategy whose outcome worked


def recoveries(records: Iterable[dict[str, Any]]) -> list[Recovery]:
    """One :class:`Recovery` per (trace, failure key) that got a recommendation, in order of time."""
    out = []
    for r in records:
        at = _at(r)
        outs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for o in r["outcomes"]:
            outs[str(o["recommendation_id"])].append(o)
        by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for rec in r["recommendations"]:
            if rec.get("failure_key") and rec.get("strategy") != "continue":
                by_key[str(rec["failure_key"])].append(rec)
        for key, recs in by_key.items():
            recs.sort(key=lambda x: x["created_at"])
            spent, n_out, fixed_by, done = 0.0, 0, None, False
            for rec in recs:
                for o in sorted(outs.get(str(rec["id"]), []), key=lambda o: o["created_at"]):
                    if done:
                        break
                    n_out += 1
                    spent += float(o.get("duration_s") or 0.0)
                    if o["success"]:
                        done, fixed_by = True, str(o["strategy"])
            out.append(Recovery(
                str(r["trace"]["id"]), at, str(recs[0].get("kind") or key.split("@")[0]), len(recs), n_out, done,
                spent if done else None, any(x.get("strategy") == "human_handoff" for x in recs), fixed_by))
    out.sort(key=lambda x: (x.at, x.trace_id, x.kind))
    return out


@dataclass(frozen=True)
class RecoveryTimes:
    failures: int  # failures that got a recommendation
    recovered: int
    by_human: int  # recovered on human_handoff
    unresolved: int  # no outcome said it worked
    mttr_s: float | None  # mean repair time of the recovered ones
    median_s: float | None
    mttr_automatic_s: float | None  # mean over those fixed without a human


def time_to_recovery(recs: list[Recovery]) -> RecoveryTimes:
    ok = [r.repair_s for r in recs if r.recovered and r.repair_s is not None]
    auto = [r.repair_s for r in recs if r.recovered and r.fixed_by != "human_handoff" and r.repair_s is not None]
    return RecoveryTimes(
        len(recs), len(ok), sum(1 for r in recs if r.fixed_by == "human_handoff"), sum(1 for r in recs if not r.recovered),
        statistics.fmean(ok) if ok else None, statistics.median(ok) if ok else None,
        statistics.fmean(auto) if auto else None)


def recovery_by_kind(recs: list[Recovery]) -> dict[str, RecoveryTimes]:
    by: dict[str, list[Recovery]] = defaultdict(list)
    for r in recs:
        by[r.kind].append(r)
    return {k: time_to_recovery(v) for k, v in sorted(by.items(), key=lambda kv: _KIND_ORDER.get(kv[0], 99))}


def _num_s(x: float | None, fmt: str = ".1f") -> str:
    return "–" if x is None else format(x, fmt)


def recovery_line(t: RecoveryTimes) -> str:
    """One sentence: failures, recovered (by a human), unresolved, MTTR with and without hand-offs."""
    return (f"{t.failures} failures with a recommendation: {t.recovered} recovered ({t.by_human} by a human), "
            f"{t.unresolved} unresolved; MTTR {_num_s(t.mttr_s)} s (median {_num_s(t.median_s)} s), "
            f"without hand-offs {_num_s(t.mttr_automatic_s)} s")


def recovery_markdown(by_kind: dict[str, RecoveryTimes]) -> str:
    """:func:`recovery_by_kind` as a Markdown table."""
    rows = ["| kind | failures | recovered | by a human | unresolved | MTTR (s) | median (s) | MTTR, no hand-off (s) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for kind, k in by_kind.items():
        rows.append(f"| {kind} | {k.failures} | {k.recovered} | {k.by_human} | {k.unresolved} | {_num_s(k.mttr_s)} | "
                    f"{_num_s(k.median_s)} | {_num_s(k.mttr_automatic_s)} |")
    return "\n".join(rows)


def label_counts(rs: list[Run]) -> dict[str, int]:
    """Runs by the source of their effective label (``none``: unlabelled)."""
    return dict(Counter(r.label_source or "none" for r in rs))


@dataclass(frozen=True)
class CurvePoint:
    """One K of an agent's learning curve: the agent model's AUROC on held-out tasks with its 95 %
    interval, and the two cheap learners fitted on the same K runs (``None`` at K = 0, zero-shot)."""

    k: str  # "0" (zero-shot), "25", …, "all"
    auroc: float
    ci: tuple[float, float]
    tfidf: float | None = None
    length: float | None = None


@dataclass(frozen=True)
class LearningCurve:
    set: str
    runs: int
    points: list[CurvePoint]


def _auroc(d: Any, where: str) -> tuple[float, tuple[float, float]]:
    try:
        a, (lo, hi) = d["auroc"], d["interval"]
        return float(a), (float(lo), float(hi))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"expected {{'auroc': x, 'interval': [lo, hi]}}, got {d!r}", path=where) from exc


def load_learning_curves(path: Path) -> dict[str, LearningCurve] | None:
    """Each set's learning curve from ``reports/learning.json`` (``triage evaluate --learning-curve``):
    the whole-run AUROC at K = 0 (zero-shot), 25, 50, … and all, or ``None`` when the file is absent.
    A file that does not read as that report raises :class:`InputError` naming the field."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"not readable JSON: {exc}", path=str(path)) from exc
    sets = data.get("sets") if isinstance(data, dict) else None
    if not isinstance(sets, dict):
        raise InputError("expected an object with an object `sets` (triage evaluate --learning-curve)", path="sets")
    out: dict[str, LearningCurve] = {}
    for name, d in sets.items():
        where = f"sets.{name}"
        if not isinstance(d, dict) or not isinstance(d.get("results"), dict):
            raise InputError("expected an object with an object `results`", path=f"{where}.results")
        points = []
        if d.get("zero_shot"):
            a, ci = _auroc(d["zero_shot"], f"{where}.zero_shot")
            points.append(CurvePoint("0", a, ci))
        keyed = []
        for key, r in d["results"].items():
            k, _, f = str(key).partition("|")
            if f != "f=1" or not k.startswith("K="):
                continue  # prefixes are another figure
            a, ci = _auroc((r or {}).get("agent"), f"{where}.results.{key}.agent")
            cheap = [float(r[m]["auroc"]) if isinstance(r.get(m), dict) else None for m in ("tfidf", "length")]
            keyed.append(CurvePoint(k[2:], a, ci, cheap[0], cheap[1]))
        keyed.sort(key=lambda p: (p.k == "all", int(p.k) if p.k.isdigit() else 0))
        out[str(name)] = LearningCurve(str(name), int(d.get("runs") or 0), points + keyed)
    return out


def curve_markdown(curve: LearningCurve) -> str:
    """One set's learning curve as a Markdown table: K, the agent model's AUROC (95 % interval), TF-IDF
    and the length fit on the same K runs."""
    rows = ["| K | agent model AUROC (95 % CI) | TF-IDF | length fit |", "| ---: | --- | ---: | ---: |"]
    for p in curve.points:
        k = "0 (zero-shot)" if p.k == "0" else p.k
        rows.append(f"| {k} | {p.auroc:.3f} ({p.ci[0]:.3f}–{p.ci[1]:.3f}) | {_num_s(p.tfidf, '.3f')} | "
                    f"{_num_s(p.length, '.3f')} |")
    return "\n".join(rows)


__all__ = ["Cooccurrence", "CurvePoint", "LearningCurve", "Recovery", "RecoveryTimes", "Run", "Spectrum",
           "StrategyEfficacy", "cooccurrence", "curve_markdown", "efficacy", "efficacy_markdown", "label_counts", "load_learning_curves",
           "recoveries", "recovery_by_kind", "recovery_line", "recovery_markdown", "runs", "spectrum", "time_to_recovery"]
