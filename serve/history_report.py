"""What a tenant's failure history says: the figures of ``research/03-failure-history.ipynb``.

Every function reads the records of :meth:`serve.store.Store.iter_history` (a trace with its
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
* :func:`load_learning_curve` — ``reports/retrain.json`` (``bench/retrain.py``), or ``None`` when
  it is absent.
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

from model.errors import InputError
from model.kinds import FailureKind
from model.semantic import wilson
from serve.run_labels import effective_label

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
class Rate:
    """A rate with its interval when the file gives one (``model.runscore.evaluate.rate_ci``'s shape)."""

    rate: float | None
    ci: tuple[float, float] | None = None
    n: int | None = None

    def text(self) -> str:
        if self.rate is None:
            return "–"
        ci = f" ({self.ci[0]:.2f}–{self.ci[1]:.2f})" if self.ci is not None else ""
        return f"{self.rate:.2f}{ci}"


@dataclass(frozen=True)
class CurvePoint:
    k: int
    auroc: float | None  # None: no challenger was promoted at this K (``refused`` says why)
    ci: tuple[float, float] | None
    false_alarms: Rate | None
    recall: Rate | None
    localisation_exact: Rate | None
    gain: tuple[float, float, float] | None = None  # AUROC gain over K = 0: (diff, lo, hi)
    refused: tuple[str, ...] = ()


@dataclass(frozen=True)
class LearningCurve:
    set: str
    points: list[CurvePoint]
    fixed: dict[str, dict[int, float]]  # fixed split → K → AUROC (``fixed_splits``), when given
    command: str | None = None


def _num(p: dict[str, Any], key: str, where: str, *, optional: bool = True) -> float | None:
    v = p.get(key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise InputError(f"expected a number, got {v!r}", path=f"{where}.{key}")
    return float(v)


def _pair(v: Any, where: str) -> tuple[float, float] | None:
    if v is None or (isinstance(v, list | tuple) and len(v) == 2 and all(x is None for x in v)):
        return None
    if not (isinstance(v, list | tuple) and len(v) == 2
            and all(isinstance(x, int | float) and not isinstance(x, bool) for x in v)):
        raise InputError(f"expected [lo, hi], got {v!r}", path=where)
    return float(v[0]), float(v[1])


def _rate(p: dict[str, Any], key: str, where: str) -> Rate | None:
    v = p.get(key)
    if v is None:
        return None
    if isinstance(v, dict):
        n = v.get("n")
        return Rate(_num(v, "rate", f"{where}.{key}"), _pair(v.get("ci"), f"{where}.{key}.ci"),
                    n if isinstance(n, int) and not isinstance(n, bool) else None)
    return Rate(_num(p, key, where))


def load_learning_curve(path: Path) -> LearningCurve | None:
    """The learning curve ``bench/retrain.py`` writes, or ``None`` when ``path`` does not exist.

    The schema: ``{"set", "points": [{"k", "auroc", "ci": [lo, hi], "false_alarms", "recall",
    "localisation_exact", "gain_vs_k0": {"diff", "ci"}, "gate": [{"promote", "reason"}, …]}],
    "fixed_splits": {name: {"auroc": {K: AUROC}}}}``; a rate is a number or ``{"rate", "n", "ci"}``;
    a point whose ``auroc`` is null is a K at which no challenger was promoted (``refused``). A file
    that does not read as that schema raises :class:`InputError` naming the field."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"not readable JSON: {exc}", path=str(path)) from exc
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        raise InputError("expected an object with a list `points`", path="points")
    points = []
    for i, p in enumerate(data["points"]):
        where = f"points[{i}]"
        if not isinstance(p, dict):
            raise InputError("expected an object", path=where)
        k = p.get("k")
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise InputError(f"expected a count >= 0, got {k!r}", path=f"{where}.k")
        auroc = _num(p, "auroc", where)
        ci = _pair(p.get("ci"), f"{where}.ci")
        if auroc is not None and ci is None:
            raise InputError("an AUROC needs its interval [lo, hi]", path=f"{where}.ci")
        g = p.get("gain_vs_k0")
        gain = None
        if isinstance(g, dict) and g.get("diff") is not None:
            diff = _num(g, "diff", f"{where}.gain_vs_k0")
            gci = _pair(g.get("ci"), f"{where}.gain_vs_k0.ci")
            if diff is not None and gci is not None:
                gain = (diff, gci[0], gci[1])
        refused: list[str] = []
        for x in p.get("refused") or []:
            refused.append(str(x.get("reason", x)) if isinstance(x, dict) else str(x))
        points.append(CurvePoint(k, auroc, ci, _rate(p, "false_alarms", where), _rate(p, "recall", where),
                                 _rate(p, "localisation_exact", where), gain, tuple(refused)))
    points.sort(key=lambda p: p.k)
    fixed: dict[str, dict[int, float]] = {}
    for name, split in (data.get("fixed_splits") or {}).items():
        by_k = (split or {}).get("auroc") if isinstance(split, dict) else None
        if isinstance(by_k, dict):
            fixed[str(name)] = {int(kk): float(v) for kk, v in by_k.items()
                                if str(kk).isdigit() and isinstance(v, int | float)}
    command = data.get("command")
    return LearningCurve(str(data.get("set", "")), points, fixed, command if isinstance(command, str) else None)


def curve_markdown(curve: LearningCurve) -> str:
    """The learning curve as a Markdown table (K, AUROC with its interval, gain over K = 0, false
    alarms, recall, exact localisation, and the fixed splits' AUROC)."""
    names = sorted(curve.fixed)
    rows = ["| K | AUROC (95 % CI) | gain vs K = 0 (95 % CI) | false alarms | recall | localisation (exact) |"
            + "".join(f" {n} |" for n in names),
            "| ---: | --- | --- | --- | --- | --- |" + " ---: |" * len(names)]
    for p in curve.points:
        fixed = "".join(f" {_num_s(curve.fixed[n].get(p.k), '.3f')} |" for n in names)
        if p.auroc is None or p.ci is None:
            why = p.refused[0] if p.refused else "no AUROC"
            rows.append(f"| {p.k} | refused: {why} | | | | |" + fixed)
            continue
        gain = f"{p.gain[0]:+.3f} ({p.gain[1]:+.3f} to {p.gain[2]:+.3f})" if p.gain else "–"
        rates = " | ".join(r.text() if r is not None else "–" for r in (p.false_alarms, p.recall, p.localisation_exact))
        rows.append(f"| {p.k} | {p.auroc:.3f} ({p.ci[0]:.3f}–{p.ci[1]:.3f}) | {gain} | {rates} |" + fixed)
    return "\n".join(rows)


__all__ = ["Cooccurrence", "CurvePoint", "LearningCurve", "Rate", "Recovery", "RecoveryTimes", "Run", "Spectrum",
           "StrategyEfficacy", "cooccurrence", "curve_markdown", "efficacy", "efficacy_markdown", "label_counts", "load_learning_curve",
           "recoveries", "recovery_by_kind", "recovery_line", "recovery_markdown", "runs", "spectrum", "time_to_recovery"]
