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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from model.core.findings import Attribution, Failure
from model.core.kinds import KIND_INFO, FailureKind
from model.core.metrics import logistic, logit
from model.core.schema import Step, StepKind, Trace
from model.scoring.agentmodel.encoded import encode_missing, unencoded

if TYPE_CHECKING:
    from model.scoring.agent_registry import Servable
    from model.scoring.agentmodel.where import WhereModel
    from model.scoring.encoder import StaticEncoder

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
    the model's ``tag``, how many ``steps`` it has read, and the model's own ``state``.

    ``encoded``: when the model reads the encoder block, ``(first, vectors)``: the float16-rounded
    vectors of the run's steps ``first`` onwards that this answer encoded (the service stores them
    with the run, so that neither a retrain nor a later read encodes them again), with ``encoder``
    the encoder's version; ``None`` otherwise."""

    tag: str
    steps: int
    state: Any
    encoded: tuple[int, np.ndarray] | None = None
    encoder: str | None = None

    def kept(self) -> Prefix:
        """What a worker keeps between appends (without the vectors, which the store has)."""
        return Prefix(self.tag, self.steps, self.state) if self.encoded is not None else self


@dataclass
class SessionPrefix:
    """What an append of a running session tells the agent model: the ``kept`` prefix state (``None``:
    read the session once), the index of the ``first`` new step, how many earlier steps the append
    re-marked from final answers to ``llm_output`` (``relabelled``), and ``memo``, the session's
    stored early-warning record (``{"model", "crossed", "p"}``), updated in place. ``stored``: when the
    kept state cannot be continued and the model reads the encoder block, ``stored(encoder version)``
    gives the vectors the store holds of the session's earlier steps (``first × dim``, NaN where it has
    none), so that the session is re-read without encoding them again."""

    kept: Prefix | None = None
    first: int = 0
    relabelled: int = 0
    memo: dict[str, Any] = field(default_factory=dict)
    stored: Callable[[str], np.ndarray | None] | None = None


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


def encoder_of(model: Servable) -> StaticEncoder | None:
    """The static encoder ``model`` reads (its encoder block), or ``None`` (a cheap learner, or an agent
    model without the block)."""
    enc = getattr(model, "encoder_", None)
    fitted = getattr(model, "fitted_", None)
    return enc if enc is not None and getattr(fitted, "w_emb", None) is not None else None


def score_prefixes(model: Servable, steps: Sequence[Step], prior: float | None, state: Any | None = None,
                   first: int = 0, crossed: int | None = None, vectors: np.ndarray | None = None
                   ) -> tuple[Any, int | None, float | None]:
    """Add ``steps`` (the run's steps from index ``first``) to ``state`` (a new one when ``None``), one
    at a time; returns the state, the first step whose prefix score reached the model's early-warning
    threshold (``crossed`` when already known) and the score there. ``vectors``: the steps' encoder
    vectors (:func:`~model.scoring.agentmodel.encoded.encode_missing`), for a model that reads the encoder block."""
    st: Any = state if state is not None else model.start()
    thr = model.at_risk_threshold
    at = None
    for i, step in enumerate(steps, first):
        if vectors is None:
            st.add(step)
        else:
            st.add(step, vectors[i - first])
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
    A model that reads the encoder block gets the steps it reads encoded in one batch, each step once
    (a re-read takes the earlier steps' stored vectors, ``session.stored``); the returned
    :class:`Prefix` carries the new ones (``encoded``) for the service to store.
    """
    model = served.model
    enc = encoder_of(model)
    n = len(trace.steps)
    if session is None:
        vecs = None if enc is None else encode_missing(enc, trace.steps)
        st, crossed, at = score_prefixes(model, trace.steps, prior, vectors=vecs)
        failure = at_risk_failure(trace, crossed, at, served) if crossed is not None and at is not None else None
        return model.score_state(st, prior=prior), failure, _prefix(served, n, st, enc, 0, vecs)
    memo = session.memo
    if memo.get("model") != served.tag:
        memo.clear()
        memo.update(model=served.tag, crossed=None, p=None)
    kept = session.kept
    first = session.first
    if kept is not None and kept.tag == served.tag and kept.steps == first:
        relabel_final_outputs(kept.state, session.relabelled)
        vecs = None if enc is None else encode_missing(enc, trace.steps[first:])
        st, crossed, at = score_prefixes(model, trace.steps[first:], prior, kept.state, first, memo["crossed"], vecs)
    else:  # another worker appended meanwhile, or a new model: read the session once
        known = session.stored(enc.version) if enc is not None and session.stored is not None and first else None
        vecs = None if enc is None else encode_missing(enc, trace.steps, known)
        st, crossed, at = score_prefixes(model, trace.steps, prior, None, 0, memo["crossed"], vecs)
        if vecs is not None and unencoded(trace.steps[:first], known):
            first = 0  # earlier steps were encoded now (a new model, or none stored): all of them are kept
        vecs = None if vecs is None else vecs[first:]
    if memo["crossed"] is None and crossed is not None:
        memo.update(crossed=crossed, p=at)
    failure = None
    if memo["crossed"] is not None and memo["crossed"] < n:
        failure = at_risk_failure(trace, int(memo["crossed"]), float(memo["p"]), served)
    return model.score_state(st, prior=prior), failure, _prefix(served, n, st, enc, first, vecs)


def _prefix(served: ServedAgent, n: int, state: Any, enc: StaticEncoder | None, first: int,
            vectors: np.ndarray | None) -> Prefix:
    if enc is None or vectors is None:
        return Prefix(served.tag, n, state)
    return Prefix(served.tag, n, state, (first, vectors), enc.version)


__all__ = [
    "AGENT_MODEL_DETECTOR",
    "RECENTRE_PSEUDO_RUNS",
    "Prefix",
    "ServedAgent",
    "SessionPrefix",
    "agent_probability",
    "at_risk_failure",
    "encoder_of",
    "recentre_offset",
    "recentred",
    "relabel_final_outputs",
    "score_prefixes",
    "where_attribution",
]
