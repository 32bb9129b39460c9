"""The decision's inputs and output: :class:`Context` in, :class:`Verdict` out.

:meth:`model.diagnosis.diagnoser.Diagnoser.decide` is the one call that says what is wrong with a
run and what the agent should do; every door (``triage diagnose``, ``POST /v1/diagnose``, the heavy
lane, a session's append, the console) calls it. What it needs from outside the trace comes in the
:class:`Context` — the agent's served model or its zero-shot re-centring, the operating point
relative to the agent's runs, the open stream alarms' findings, the repair state and budgets, the
request's options — so the same trace and context give the same verdict wherever it is asked.
:func:`conclude` is its last part, written once: the agent model's answer, the primary failure
(:func:`model.core.findings.primary_of`), and the recommendation (:class:`~model.diagnosis.repair_engine.RepairEngine`).

>>> from model.core.schema import Step, Trace
>>> from model.diagnosis.diagnoser import Diagnoser
>>> t = Trace(steps=[Step(kind="user_input", content="2+2?"), Step(kind="final_output", content="4")])
>>> Diagnoser().decide(t, Context()).response.recommendation.strategy.value
'continue'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from model.core.coverage import verdict
from model.core.findings import (
    DiagnosisResponse,
    Finding,
    ProbabilityBasis,
    primary_of,
    step_order,
)
from model.core.options import DiagnoseOptions
from model.core.schema import Trace
from model.diagnosis.agent_answer import (
    AGENT_MODEL_DETECTOR,
    Prefix,
    ServedAgent,
    SessionPrefix,
    agent_probability,
    recentred,
    where_attribution,
)
from model.diagnosis.repair_engine import Decision, RepairEngine
from model.diagnosis.run_verdict import relocated


class Window(Protocol):
    """How a running session is read (:class:`model.diagnosis.incremental.SessionWindow`): the
    detectors over a window of its newest steps, the rest kept in the session's state. ``owner``:
    the diagnoser whose detectors it runs (the one :meth:`~model.diagnosis.diagnoser.Diagnoser.decide`
    is called on)."""

    @property
    def owner(self) -> object: ...

    def assess(self, trace: Trace, options: DiagnoseOptions,
               alarms: Sequence[Finding]) -> tuple[DiagnosisResponse, Trace]:
        """The findings fused, with the probability so far; and the trace the recommendation reads."""
        ...


@dataclass
class Context:
    """What a decision reads besides the trace. Every field has the default of a new agent's first run.

    Parameters
    ----------
    options:
        The request's options (detectors, allowed tools, equivalents, fallback models, shadow …).
    served:
        The agent model answering the run's agent (:class:`~model.diagnosis.agent_answer.ServedAgent`);
        ``None``: the zero-shot probability answers.
    agent:
        The run's agent (named in ``failure_probability_basis``); ``None``: outside the service.
    recentring:
        ``(labelled runs, logit offset)`` of the zero-shot probability on the agent's labelled runs
        (:func:`~model.diagnosis.agent_answer.recentre_offset`); read only without ``served``.
    run_threshold:
        The operating point relative to the agent's own runs (may only raise the scorer's own).
    alarms:
        Findings of the agent's open stream alarms (``degradation``).
    state:
        The repair state (JSON dict) of the run's session, **updated in place** and returned in the
        verdict; ``None``: a new one.
    session_key:
        The key recommendation ids and budgets are kept under; default ``trace:<trace id>``.
    now:
        Seconds on the caller's clock (budgets of recovery time).
    window:
        A running session read window by window (its probability decides nothing: the run goes on).
    prefix:
        A running session's agent-model prefix memory (with ``window``).
    """

    options: DiagnoseOptions = field(default_factory=DiagnoseOptions)
    served: ServedAgent | None = None
    agent: str | None = None
    recentring: tuple[int, float] = (0, 0.0)
    run_threshold: float | None = None
    alarms: Sequence[Finding] = ()
    state: dict[str, Any] | None = None
    session_key: str | None = None
    now: float = 0.0
    window: Window | None = None
    prefix: SessionPrefix | None = None


@dataclass(frozen=True)
class Verdict:
    """The whole answer: the response (failures, signals, primary, probability and its basis,
    attribution, the recommendation), the repair engine's :class:`~model.diagnosis.repair_engine.Decision`
    (whether the recommendation is new, the failure and rung it is on), the new repair ``state``
    and the agent model's ``prefix`` state (``None``: no agent model answered)."""

    response: DiagnosisResponse
    decision: Decision
    state: dict[str, Any]
    prefix: Prefix | None = None


def conclude(resp: DiagnosisResponse, trace: Trace, view: Trace, ctx: Context, engine: RepairEngine,
             recipe: str | None) -> Verdict:
    """The decision's last part, on the fused ``resp``: the agent model's probability and early
    warning (or the zero-shot one re-centred), the primary failure by :func:`~model.core.findings.precedence`,
    and the repair engine's recommendation on ``view`` (the trace, in the language it speaks).
    ``recipe``: the zero-shot recipe's name (the basis of a zero-shot probability)."""
    state = ctx.state if ctx.state is not None else {}
    prefix = None
    p0 = resp.failure_probability
    served = ctx.served
    if served is not None:
        if ctx.prefix is not None:
            state["agent_model"] = ctx.prefix.memo
        probability, at_risk, prefix = agent_probability(served, trace, p0, ctx.prefix)
        resp.failure_probability = probability
        localiser = "position prior" if resp.attribution is not None else None
        if served.where is not None and resp.attribution is not None:
            moved = where_attribution(served.where, trace)
            if moved is not None:
                resp.attribution, localiser = moved, "where model"
                resp.failures = sorted((relocated(f, trace, moved, resp.signals) for f in resp.failures),
                                       key=step_order)
        resp.failure_probability_basis = ProbabilityBasis(
            model="agent", agent=served.agent, labelled_runs=served.labelled_runs, cv_auroc=served.cv_auroc,
            version=served.tag, zero_shot_probability=p0, learner=served.learner, localiser=localiser)
        resp.model_version = f"{resp.model_version}+{served.version}"
        resp.detector_versions[AGENT_MODEL_DETECTOR] = served.model.version
        if at_risk is not None:
            resp.failures = sorted([*resp.failures, at_risk], key=step_order)
    else:
        state.pop("agent_model", None)
        n, offset = ctx.recentring
        if p0 is not None and n:
            resp.failure_probability = recentred(p0, offset)
        if ctx.agent is not None:
            resp.failure_probability_basis = ProbabilityBasis(
                model="zero-shot", agent=ctx.agent, labelled_runs=n if p0 is not None else 0, version=recipe,
                zero_shot_probability=p0, localiser="position prior" if resp.attribution is not None else None)
    resp.primary = primary_of(resp.failures)
    resp.healthy = verdict(resp.coverage, failures=len(resp.failures))
    session_key = ctx.session_key or f"trace:{trace.id}"
    decision = engine.recommend(state, view, resp.failures, session_key=session_key, now=ctx.now,
                                options=ctx.options)
    resp.recommendation = decision.recommendation
    return Verdict(resp, decision, state, prefix)


__all__ = ["Context", "Verdict", "Window", "conclude"]
