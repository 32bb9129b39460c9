"""A failure history to study: traces replayed through the service into a store, with outcomes.

The history notebook (``research/03-failure-history.ipynb``) and its tests need a store that holds
what a running service accumulates — diagnoses, recommendations climbing their ladders, outcomes,
labels — over weeks. :func:`replay` makes one: each trace goes through
:meth:`serve.services.triage.TriageService.diagnose` (the method behind ``POST /v1/diagnose``), and each
recommendation it gets is carried out by a **simulated agent**: :class:`OutcomeModel` draws, from its
seed, whether the repair worked and how long it took, and the outcome is posted through
:meth:`~serve.services.triage.TriageService.report_outcome` (``POST /v1/outcomes``), which moves the failure
up its ladder when it did not. Some runs get a task checker's verdict (their true label) through
:meth:`~serve.services.triage.TriageService.add_label`.

The outcomes are **drawn, not observed**: the success rates and times in the notebook's efficacy
table are those of :class:`OutcomeModel` as seen through the real ladders and budgets (a repair of
a failure the run does not have succeeds less often), not evidence of how well a strategy works.

Traces: generated ones (:mod:`model.data.datagen`), in :class:`Phase` s whose failure-kind weights can
change (an outage week), and optionally the first task groups of the vendored real sets
(:func:`model.data.realdata.first_groups`). Each run is placed in simulated time (its steps' timestamps
shifted to it), which is what the history's "over time" reads.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from model.core.errors import InputError
from model.core.kinds import Strategy
from model.core.options import DiagnoseOptions
from model.core.schema import Trace
from model.data.datagen.generator import GenerateConfig, generate
from model.diagnosis.diagnoser import Diagnoser
from serve.schemas import LabelRequest, OutcomeRequest
from serve.services.triage import TriageService

#: P(the repair works) when the diagnosis names a failure the run really has.
DEFAULT_SUCCESS: dict[str, float] = {
    "retry": 0.55, "adjust_parameters": 0.5, "switch_tool": 0.65, "self_correct": 0.6, "clarify": 0.5,
    "refresh_context": 0.6, "rollback": 0.7, "replan_local": 0.55, "replan_global": 0.5,
    "fallback_model": 0.7, "human_handoff": 0.9,
}
#: Median seconds a strategy takes to carry out (log-normal around it).
DEFAULT_SECONDS: dict[str, float] = {
    "retry": 4.0, "adjust_parameters": 6.0, "switch_tool": 9.0, "self_correct": 12.0, "clarify": 45.0,
    "refresh_context": 15.0, "rollback": 20.0, "replan_local": 25.0, "replan_global": 60.0,
    "fallback_model": 10.0, "human_handoff": 900.0,
}


@dataclass(frozen=True)
class OutcomeModel:
    """The simulated agent that carries out recommendations (seeded: same seed, same outcomes).

    Parameters
    ----------
    seed:
        The draws' seed.
    success:
        Strategy → P(success) when the diagnosed kind is one of the run's true failures (or the
        run is known to have failed and its kind is not known).
    wrong_factor:
        Multiplies that probability when the diagnosis is wrong (the run did not fail, or failed
        otherwise).
    seconds, sigma:
        Strategy → median duration; the log-normal's sigma.
    cost_per_s:
        Cost of a second of repair (the outcome's ``cost``).
    """

    seed: int = 0
    success: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_SUCCESS))
    wrong_factor: float = 0.4
    seconds: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_SECONDS))
    sigma: float = 0.6
    cost_per_s: float = 0.001

    def __post_init__(self) -> None:
        for name, p in self.success.items():
            if name not in {s.value for s in Strategy}:
                raise InputError(f"unknown strategy {name!r}", path="success")
            if not 0 <= p <= 1:
                raise InputError(f"P(success) of {name} must be in [0, 1], got {p}", path="success")
        if not 0 <= self.wrong_factor <= 1:
            raise InputError(f"must be in [0, 1], got {self.wrong_factor}", path="wrong_factor")


@dataclass(frozen=True)
class Phase:
    """A stretch of simulated time: ``runs`` generated runs over ``days``, failure kinds weighted
    by ``kind_weights`` (default 1 each; see :class:`model.data.datagen.generator.GenerateConfig`)."""

    runs: int
    days: float = 7.0
    kind_weights: dict[str, float] = field(default_factory=dict)
    healthy_rate: float = 0.3


#: Eight weeks: a steady mix, a provider incident in weeks 4-5 (timeouts, rate limits, provider
#: errors weighted up), then steady again.
INCIDENT = {"timeout": 6.0, "rate_limited": 6.0, "provider_error": 4.0}
DEFAULT_PHASES = (Phase(3, 21.0), Phase(2, 14.0, INCIDENT, healthy_rate=0.15), Phase(3, 21.0))


def scaled(phases: Iterable[Phase], runs: int) -> list[Phase]:
    """``phases`` with ``runs`` runs in all, shared in proportion to their ``runs``."""
    ps = list(phases)
    total = sum(p.runs for p in ps)
    if total <= 0 or runs < len(ps):
        raise InputError(f"need at least one run per phase ({len(ps)}), got {runs}", path="runs")
    exact = [runs * p.runs / total for p in ps]
    counts = [max(1, math.floor(x)) for x in exact]
    # the runs left over go to the phases with the largest remainders (the total is exactly ``runs``)
    for i in sorted(range(len(ps)), key=lambda i: counts[i] - exact[i])[: max(0, runs - sum(counts))]:
        counts[i] += 1
    return [Phase(n, p.days, p.kind_weights, p.healthy_rate) for n, p in zip(counts, ps, strict=True)]


@dataclass
class ReplaySummary:
    traces: int = 0
    real: int = 0  # of them, runs of the vendored real sets
    recommendations: int = 0
    outcomes: int = 0
    checker_labels: int = 0
    outcome_labels: int = 0
    recovered: int = 0
    handed_off: int = 0
    first: datetime | None = None
    last: datetime | None = None


def _truth(trace: Trace) -> tuple[bool | None, set[str]]:
    labels = trace.labels
    if labels is None:
        return None, set()
    return (not labels.healthy), {k.value for k in labels.kinds}


def place(trace: Trace, at: datetime) -> Trace:
    """The run moved to ``at``: its steps' timestamps shifted (gaps kept), missing ones a second apart."""
    stamps = [s.timestamp for s in trace.steps]
    first = next((t for t in stamps if t is not None), None)
    for i, s in enumerate(trace.steps):
        s.timestamp = at + (s.timestamp - first if s.timestamp is not None and first is not None
                            else timedelta(seconds=i))
    return trace


def generated_runs(phases: Iterable[Phase], *, seed: int, start: datetime) -> Iterator[tuple[datetime, Trace]]:
    """Generated runs of each phase, spread evenly over its days (in order of time)."""
    t0 = start
    for n, ph in enumerate(phases):
        cfg = GenerateConfig(n_traces=ph.runs, seed=seed + 1000 * n, kind_weights=dict(ph.kind_weights),
                             healthy_rate=ph.healthy_rate)
        step = timedelta(days=ph.days) / max(1, ph.runs)
        for i, trace in enumerate(generate(cfg)):
            yield t0 + step * i, trace
        t0 += timedelta(days=ph.days)


def replay(
    service: TriageService,
    tenant: str,
    runs: Iterable[tuple[datetime, Trace]],
    *,
    model: OutcomeModel,
    checker_share: float = 0.3,
    outcome_label_share: float = 0.1,
    max_outcomes: int = 12,
) -> ReplaySummary:
    """Replay ``runs`` (time, trace) into ``service``'s store as tenant ``tenant`` (module docstring).

    Each run is diagnosed on its own (its session id dropped: replayed runs share no repair
    state); while the recommendation is a repair, the simulated agent reports an outcome, and a
    failed one brings the next rung (at most ``max_outcomes`` per run). ``checker_share`` of the
    runs with a known truth get a checker's label (author ``replay-checker``);
    ``outcome_label_share`` of the successful outcomes carry a ``label`` (the failure the
    recommendation addressed, when the run really has it; else ``healthy``).
    """
    rng = random.Random(model.seed)
    out = ReplaySummary()
    for at, trace in runs:
        trace = place(trace.model_copy(deep=True), at)
        trace.session_id = None
        failed, kinds = _truth(trace)
        trace.labels = None  # an agent sends its run, not the answer
        resp = service.diagnose(tenant, trace, DiagnoseOptions())
        out.traces += 1
        out.first = at if out.first is None else min(out.first, at)
        out.last = at if out.last is None else max(out.last, at)
        primary = resp.primary.kind.value if resp.primary is not None else None
        right = bool(failed) and (not kinds or primary in kinds)
        rec = resp.recommendation
        for _ in range(max_outcomes):
            if rec.strategy is Strategy.CONTINUE:
                break
            out.recommendations += 1
            name = rec.strategy.value
            p = model.success.get(name, 0.5) * (1.0 if right else model.wrong_factor)
            ok = rng.random() < p
            secs = model.seconds.get(name, 10.0) * math.exp(rng.gauss(0.0, model.sigma))
            label = None
            if ok and rng.random() < outcome_label_share:
                label = primary if right else "healthy"
            got = service.report_outcome(tenant, OutcomeRequest.model_validate({
                "recommendation_id": rec.id, "success": ok, "duration_s": round(secs, 3),
                "cost": round(secs * model.cost_per_s, 6), "label": label}))
            out.outcomes += 1
            out.outcome_labels += label is not None
            if rec.strategy is Strategy.HUMAN_HANDOFF:
                out.handed_off += 1
            if ok:
                out.recovered += 1
                break
            if got.next is None:
                break
            rec = got.next
        if failed is not None and rng.random() < checker_share:
            service.add_label(tenant, trace.id, LabelRequest(failed=failed, author="replay-checker",
                                                            author_type="checker"))
            out.checker_labels += 1
    return out


def replay_into(
    data_dir: Path,
    *,
    runs: int = 400,
    real_groups: int = 0,
    seed: int = 0,
    tenant: str = "local",
    phases: Iterable[Phase] = DEFAULT_PHASES,
    start: datetime = datetime(2026, 1, 5, tzinfo=UTC),
    diagnoser: Diagnoser | None = None,
) -> tuple[str, ReplaySummary]:
    """A fresh SQLite store in ``data_dir`` holding a replayed history; returns its URL and the summary.

    ``runs`` generated runs over ``phases``; plus, with ``real_groups``, the runs of the first
    that many task groups of each vendored real set, spread over the same weeks. The service is
    built as ``triage serve`` builds it (shipped run scorer, rules; the classifier only when
    ``diagnoser`` brings it).
    """
    from serve.settings import Settings
    from serve.wiring import build_service, load_runscorer

    data_dir.mkdir(parents=True, exist_ok=True)
    db = data_dir / "triage.db"
    if db.exists():
        raise InputError(f"{db} exists: replay into an empty folder", path="data_dir")
    settings = Settings(data_dir=data_dir)
    service = build_service(settings, diagnoser or Diagnoser(runscorer=load_runscorer(settings)))
    try:
        ps = scaled(phases, runs)
        timeline = list(generated_runs(ps, seed=seed, start=start))
        if real_groups > 0:
            from model.data.realdata import first_groups, load_all

            real = first_groups(load_all(), real_groups)
            span = sum((timedelta(days=p.days) for p in ps), timedelta())
            timeline += [(start + span * (i + 0.5) / len(real), r.trace) for i, r in enumerate(real)]
            timeline.sort(key=lambda x: x[0])
        summary = replay(service, tenant, timeline, model=OutcomeModel(seed=seed))
        summary.real = len(timeline) - sum(p.runs for p in ps)
    finally:
        service.close()
    return settings.resolved_database_url, summary


__all__ = ["DEFAULT_PHASES", "INCIDENT", "OutcomeModel", "Phase", "ReplaySummary", "generated_runs", "place",
           "replay", "replay_into", "scaled"]
