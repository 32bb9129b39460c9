"""What an agent's own model adds to a diagnosis: its probability, the early warning, re-centring.

A run's ``failure_probability`` comes from the agent's own model (:mod:`model.scoring.agentmodel`:
an :class:`~model.scoring.agentmodel.model.AgentModel` or the cheap learner ``triage retrain``
measured better) when one serves the agent (:class:`ServedAgent`, chosen by the service); it reads
the run **prefix by prefix**, and where a prefix first reaches the model's early-warning point it
raises an ``at_risk`` failure (:func:`at_risk_failure`). Without one, the zero-shot probability is
re-centred on the agent's observed failure rate once it has labelled runs (:func:`recentre_offset`,
:func:`recentred`). :meth:`model.diagnosis.diagnoser.Diagnoser.decide` applies all of it; the
service only loads the served model and the offset.

>>> recentred(0.5, 0.0) == 0.5 and recentred(0.5, 1.0) > 0.5
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from model.core.findings import Attribution, Failure
from model.core.kinds import KIND_INFO, FailureKind
from model.core.metrics import logistic, logit
from model.core.schema import Step, StepKind, Trace

if TYPE_CHECKING:
    from model.scoring.agent_registry import Servable
    from model.scoring.agentmodel.where import WhereModel

#: The detector name of an ``at_risk`` failure.
AGENT_MODEL_DETECTOR = "agent_model"
#: Pseudo-runs at the zero-shot's own mean rate that the observed failure rate is shrunk towards.
RECENTRE_PSEUDO_RUNS = 10.0


@dataclass(frozen=True)
class ServedAgent:
    """The agent model answering one (tenant, agent), as a request uses it from its start to its end:
    an :class:`~model.scoring.agentmodel.model.AgentModel`, or the cheap learner
    (:class:`~model.scoring.agentmodel.cheap.CheapModel`) ``triage retrain`` measured better.

    ``key`` is its registry key (the agent, or the tenant's pooled model); ``version`` its registry
    version; ``tenant`` only labels it (metrics, logs). ``where``: the agent's own where-model, registered
    beside the model when ``triage retrain`` kept it (:mod:`model.training.agentmodel.where_served`);
    ``None``: the shipped attribution answers."""

    tenant: str
    agent: str
    key: str
    version: str
    model: Servable
    where: WhereModel | None = None

    @property
    def learner(self) -> str:
        """``agent`` (the agent model), ``tfidf`` or ``length`` (a cheap learner served in its place)."""
        return str(getattr(self.model, "learner", "agent"))

    @property
    def labelled_runs(self) -> int:
        return int(self.model.card_.get("labelled_runs") or 0)

    @property
    def cv_auroc(self) -> float | None:
        value = self.model.card_.get("cv_auroc")
        return float(value) if isinstance(value, int | float) and math.isfinite(value) else None

    @property
    def tag(self) -> str:
        return f"{self.key}@{self.version}"


@dataclass(frozen=True)
class Prefix:
    """A session's prefix state under its agent model, kept by a worker between appends:
    the model's ``tag``, how many ``steps`` it has read, and the model's own ``state``."""

    tag: str
    steps: int
    state: Any


@dataclass
class SessionPrefix:
    """What an append of a running session tells the agent model: the ``kept`` prefix state (``None``:
    read the session once), the index of the ``first`` new step, how many earlier steps the append
    re-marked from final answers to ``llm_output`` (``relabelled``), and ``memo``, the session's
    stored early-warning record (``{"model", "crossed", "p"}``), updated in place."""

    kept: Prefix | None = None
    first: int = 0
    relabelled: int = 0
    memo: dict[str, Any] = field(default_factory=dict)


def recentre_offset(probabilities: Sequence[float], failed: Sequence[bool]) -> float:
    """The logit shift that makes the mean of the shifted zero-shot probabilities equal the agent's
    observed failure rate, shrunk towards their own mean by :data:`RECENTRE_PSEUDO_RUNS` pseudo-runs
    (a few labels move it a little; many, to the observed rate). Bisection on a monotone function.

    >>> recentre_offset([0.3, 0.3], [True, True]) > 0 > recentre_offset([0.3, 0.3], [False, False])
    True
    """
    if not probabilities:
        return 0.0
    logits = [logit(p) for p in probabilities]
    mean_p = sum(probabilities) / len(probabilities)
    target = (sum(failed) + RECENTRE_PSEUDO_RUNS * mean_p) / (len(failed) + RECENTRE_PSEUDO_RUNS)
    lo, hi = -20.0, 20.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(logistic(z + mid) for z in logits) / len(logits) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def recentred(probability: float, offset: float) -> float:
    """``probability`` shifted by ``offset`` on the logit scale (numerically stable)."""
    z = math.log(max(probability, 1e-6) / max(1 - probability, 1e-6)) + offset
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def at_risk_failure(trace: Trace, step: int, probability: float, served: ServedAgent) -> Failure:
    """The ``at_risk`` failure raised where the agent model's prefix score first reached its
    early-warning threshold; its confidence maps the threshold to 0.5 (the kind's fusion threshold)."""
    thr = float(served.model.at_risk_threshold or 0.5)
    conf = 0.5 + 0.5 * (probability - thr) / max(1e-9, 1.0 - thr)
    info = KIND_INFO[FailureKind.AT_RISK]
    st = trace.steps[step]
    return Failure(
        kind=FailureKind.AT_RISK, category=info.category, severity=info.severity,
        confidence=min(1.0, max(0.5, conf)), detector=AGENT_MODEL_DETECTOR, detectors=[AGENT_MODEL_DETECTOR],
        step=step, source_index=st.source_index, span_id=st.span_id,
        evidence=(f"{AGENT_MODEL_DETECTOR}: agent {served.agent!r}'s model ({served.tag}) put the run so far at "
                  f"failure probability {probability:.2f} ≥ its early-warning point {thr:.2f}, first at step {step}"),
        details={"prefix_probability": probability, "threshold": thr, "model": served.tag,
                 "labelled_runs": served.labelled_runs},
    )


def where_attribution(where: WhereModel, trace: Trace) -> Attribution | None:
    """The where-model's ``attribution`` of ``trace``: its most likely failing message (``None``: no
    candidate message)."""
    probs = where.probabilities(trace)
    if not probs:
        return None
    si, p = max(probs, key=lambda sp: sp[1])
    step = next(i for i, s in enumerate(trace.steps) if s.source_index == si and s.kind is not StepKind.SYSTEM)
    return Attribution(step=step, source_index=si, speaker=trace.steps[step].speaker, probability=min(1.0, max(0.0, p)))


def relabel_final_outputs(state: Any, n: int) -> None:
    """``n`` steps the prefix state counted as final answers are answers no more (more work followed
    them: a session append re-marks them ``llm_output``); the state counts them so, as a fresh read
    of the session would. (A cheap learner's state reads answers and outputs alike.)"""
    from model.scoring.agentmodel.cheap import CheapState

    if n and not isinstance(state, CheapState):
        from model.scoring.agentmodel.features import SHAPE_FEATURES

        state.counts.shape[SHAPE_FEATURES.index("final_outputs")] -= n


def score_prefixes(model: Servable, steps: Sequence[Step], prior: float | None, state: Any | None = None,
                   first: int = 0, crossed: int | None = None) -> tuple[Any, int | None, float | None]:
    """Add ``steps`` (the run's steps from index ``first``) to ``state`` (a new one when ``None``), one
    at a time; returns the state, the first step whose prefix score reached the model's early-warning
    threshold (``crossed`` when already known) and the score there."""
    st: Any = state if state is not None else model.start()
    thr = model.at_risk_threshold
    at = None
    for i, step in enumerate(steps, first):
        st.add(step)
        if crossed is None and thr is not None:
            p = model.score_state(st, prior=prior)
            if p >= thr:
                crossed, at = i, p
    return st, crossed, at


def agent_probability(served: ServedAgent, trace: Trace, prior: float | None, session: SessionPrefix | None = None
                      ) -> tuple[float, Failure | None, Prefix]:
    """The agent model's answer on ``trace``: its probability, the ``at_risk`` failure where a
    prefix first reached its early-warning point (``None``: none did) and the prefix state to keep.

    A whole run is read step by step from its start. A session append (``session``) continues the
    kept state when it is this model's and has read exactly the steps before ``session.first``
    (O(1) per new step), else reads the session once; the early warning is remembered in
    ``session.memo`` (it stays raised at the step it was first raised, while the model is the same).
    """
    model = served.model
    if session is None:
        st, crossed, at = score_prefixes(model, trace.steps, prior)
        failure = at_risk_failure(trace, crossed, at, served) if crossed is not None and at is not None else None
        return model.score_state(st, prior=prior), failure, Prefix(served.tag, len(trace.steps), st)
    memo = session.memo
    if memo.get("model") != served.tag:
        memo.clear()
        memo.update(model=served.tag, crossed=None, p=None)
    kept = session.kept
    if kept is not None and kept.tag == served.tag and kept.steps == session.first:
        relabel_final_outputs(kept.state, session.relabelled)
        st, crossed, at = score_prefixes(model, trace.steps[session.first:], prior, kept.state, session.first,
                                         memo["crossed"])
    else:  # another worker appended meanwhile, or a new model: read the session once
        st, crossed, at = score_prefixes(model, trace.steps, prior, None, 0, memo["crossed"])
    if memo["crossed"] is None and crossed is not None:
        memo.update(crossed=crossed, p=at)
    failure = None
    if memo["crossed"] is not None and memo["crossed"] < len(trace.steps):
        failure = at_risk_failure(trace, int(memo["crossed"]), float(memo["p"]), served)
    return model.score_state(st, prior=prior), failure, Prefix(served.tag, len(trace.steps), st)


__all__ = [
    "AGENT_MODEL_DETECTOR",
    "RECENTRE_PSEUDO_RUNS",
    "Prefix",
    "ServedAgent",
    "SessionPrefix",
    "agent_probability",
    "at_risk_failure",
    "recentre_offset",
    "recentred",
    "relabel_final_outputs",
    "score_prefixes",
    "where_attribution",
]
