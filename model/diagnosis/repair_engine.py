"""The repair engine: which rung each open failure is on, and the budgets (circuit breakers).

:class:`model.diagnosis.ladders.Ladders` answers "what is rung *r* of this failure's ladder"; this module keeps
the state that decides *r* across calls, as a JSON-able dict the service stores per session, so
any worker can take the next step (docs/architecture.md, "The stateful service"):

- A failure is keyed by ``(session, source_index, kind)``. While it is open, every diagnosis that
  still shows it returns the **same** recommendation (same ``id``) and spends no budget.
- A failed outcome for a failure's current recommendation moves it up: to the next attempt inside
  the rung when the rung allows several (``retry``'s ``max_attempts``), else to the next rung —
  also when later steps had made its finding go (the agent gave up and told the user: a signal). An
  outcome for a recommendation that is no longer current changes nothing (no double escalation).
  A successful outcome resolves the failure; so does a later diagnosis that no longer shows it.
  A failure an outcome resolved comes back, one rung up, when its finding later reaches past the
  step the outcome came at (a loop that repeats again after a rollback reported successful).
- Budgets, defaults in the policy file's ``budgets`` section: per failure at most 3 rungs (the
  attempts inside one rung count as one); per task (steps after one ``user_input``) at most 300 s
  of recovery, from its first failure to its latest outcome, and at most 5 recommendations; per
  session at most 2 ``replan_global``. When a budget is spent the answer is ``human_handoff``,
  never another loop, and the failure stays handed off.
- Rungs that cannot be carried out are skipped without spending budget: a retry marked
  ``only_if_transient`` for a permanent error (HTTP 400, "invalid …"), ``switch_tool`` with no
  equivalent tool in the request, ``fallback_model`` with no fallback model.

>>> from model.core.schema import Step, Trace
>>> from model.core.findings import Failure
>>> t = Trace(steps=[Step(kind="user_input", content="hi"), Step(kind="tool_call", tool_name="s")])
>>> f = Failure(kind="timeout", category="technical", severity="medium", confidence=1.0,
...             detector="timeout", step=1, source_index=1)
>>> engine = RepairEngine.load()
>>> state: dict = {}
>>> first = engine.recommend(state, t, [f], session_key="s1", now=0.0)
>>> first.recommendation.strategy.value, first.new
('retry', True)
>>> engine.recommend(state, t, [f], session_key="s1", now=1.0).recommendation.id == first.recommendation.id
True
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from model.core.errors import InputError
from model.core.findings import Failure, Recommendation, primary_of
from model.core.graph import step_failure
from model.core.kinds import FailureKind, Strategy
from model.core.options import DiagnoseOptions
from model.core.schema import StepKind, StepStatus, Trace
from model.diagnosis.ladders import DEFAULT_POLICY_PATH, Ladders, Rung, is_transient

_ID_NAMESPACE = uuid.UUID("2d0f4a8e-5c61-4f0b-8d7e-9b3a6c1e2f44")

OPEN, RESOLVED, HANDOFF = "open", "resolved", "handoff"


class Budgets(BaseModel):
    """The circuit breakers (policy file section ``budgets``)."""

    model_config = ConfigDict(extra="forbid")

    failure_rungs: int = Field(
        default=3, ge=1, description="rungs per failure; attempts in a rung count as one"
    )
    task_recovery_s: float = Field(
        default=300.0, gt=0, description="first failure → latest outcome, per task"
    )
    task_recommendations: int = Field(default=5, ge=1, description="recommendations per task")
    session_replan_global: int = Field(default=2, ge=0, description="replan_global per session")


def _read_budgets(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"cannot read policy file: {exc}", path=str(path)) from exc
    section = raw.get("budgets") if isinstance(raw, dict) else None
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise InputError(f"must be a mapping; got {type(section).__name__}", path=f"{path}:budgets")
    return section


def load_budgets(path: Path | None = None) -> Budgets:
    """The default file's ``budgets`` with ``path``'s laid over them, key by key."""
    merged = _read_budgets(DEFAULT_POLICY_PATH)
    if path is not None:
        merged.update(_read_budgets(path))
    try:
        return Budgets.model_validate(merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise InputError(f"{err['msg']} (got {err.get('input')!r})", path=f"budgets.{loc}") from exc


@dataclass(frozen=True)
class Decision:
    """What :meth:`RepairEngine.recommend` / :meth:`RepairEngine.on_outcome` decided.

    ``new`` is True when the recommendation was issued now (store it); False when an open
    failure's standing recommendation is repeated. ``failure_key``, ``rung`` and ``attempt``
    locate it (None / 0 / 1 for ``continue``).
    """

    recommendation: Recommendation
    new: bool
    failure_key: str | None = None
    rung: int = 0
    attempt: int = 1


def failure_key(f: Failure) -> str:
    """``"<kind>@<source_index>"`` (``@-`` for trace-level failures)."""
    return f"{f.kind.value}@{'-' if f.source_index is None else f.source_index}"


def task_key(trace: Trace, step: int | None) -> str:
    """The task a step belongs to: the index of the last ``user_input`` at or before it."""
    stop = len(trace.steps) if step is None else min(step + 1, len(trace.steps))
    for i in range(stop - 1, -1, -1):  # back from the step: a long session's task began lately
        if trace.steps[i].kind == StepKind.USER_INPUT:
            return f"u{i}"
    return "u-1"


#: Failures that a later successful step of the same kind can show resolved (a transient error
#: the agent already got past); the logical ones stay open until an outcome says otherwise.
RESOLVABLE_BY_LATER_STEPS: frozenset[FailureKind] = frozenset(
    {FailureKind.TOOL_ERROR, FailureKind.TIMEOUT, FailureKind.RATE_LIMITED, FailureKind.PROVIDER_ERROR}
)


def resolved_by_later_steps(trace: Trace, failure: Failure) -> bool:
    """True when a step after ``failure`` shows it got past it: for a failed tool call, a later
    result of the same tool that did not fail; for a failed LLM call, a later non-empty answer.

    >>> from model.core.schema import Step
    >>> t = Trace(steps=[Step(kind="tool_result", tool_name="s", content="HTTP 503", status="error"),
    ...                  Step(kind="tool_result", tool_name="s", content="18C")])
    >>> f = Failure(kind="tool_error", category="technical", severity="high", confidence=1.0,
    ...             detector="tool_error", step=0, source_index=0)
    >>> resolved_by_later_steps(t, f)
    True
    """
    if failure.kind not in RESOLVABLE_BY_LATER_STEPS or failure.step is None:
        return False
    if failure.step >= len(trace.steps):
        return False
    failed = trace.steps[failure.step]
    tool = failure.details.get("tool") or failed.tool_name
    for later in trace.steps[failure.step + 1 :]:
        if failure.kind == FailureKind.PROVIDER_ERROR and not tool:
            if later.kind in (StepKind.LLM_OUTPUT, StepKind.FINAL_OUTPUT, StepKind.TOOL_CALL) and (
                later.content.strip() or later.kind == StepKind.TOOL_CALL
            ):
                return True
        elif (
            later.kind == StepKind.TOOL_RESULT
            and later.tool_name == tool
            and later.status in (None, StepStatus.OK)
            and step_failure(later) is None
        ):
            return True
    return False


class Reach(NamedTuple):
    """How far a finding's evidence reaches: the step and the input position (``source_index``)
    of its latest evidence, ``None`` where it has none."""

    step: int | None
    source_index: int | None


def reach(f: Failure) -> Reach:
    """How far ``f``'s evidence reaches: its own step, or a loop's last repeat (``details.repeats``
    lists each repeated call and its result). The one rule: the engine reopens a resolved failure
    whose finding reaches past the outcome's step; a session step sends it with each failure
    (``reach_step``, ``reach_source_index``), and the client's executor judges a repair by it.

    >>> f = Failure(kind="loop", category="logical", severity="high", confidence=0.9, detector="loop",
    ...             step=4, source_index=4, details={"repeats": [{"call_step": 5, "result_step": 6,
    ...                                                           "call_source_index": 5, "result_source_index": 6}]})
    >>> reach(f)
    Reach(step=6, source_index=6)
    """
    step, source_index = f.step, f.source_index
    repeats = f.details.get("repeats")
    for r in repeats if isinstance(repeats, list) else []:
        if isinstance(r, dict):
            step = _latest(step, [r.get(k) for k in ("result_step", "call_step", "step")])
            source_index = _latest(source_index, [r.get(k) for k in ("result_source_index", "call_source_index",
                                                                     "source_index")])
    return Reach(step, source_index)


def _latest(current: int | None, values: list[Any]) -> int | None:
    for v in values:
        if isinstance(v, int) and v > (current if current is not None else -1):
            current = v
    return current


class RepairEngine:
    """The ladder (:class:`model.diagnosis.ladders.Ladders`) plus per-session state and budgets.

    Parameters
    ----------
    ladders:
        The ladders.
    budgets:
        The circuit breakers.

    State is a plain dict (JSON-serialisable); the methods update it in place. Times are seconds
    on any monotonic-enough clock the caller chooses (the service passes UNIX time).
    """

    def __init__(self, ladders: Ladders, budgets: Budgets | None = None) -> None:
        self.ladders = ladders
        self.budgets = budgets or Budgets()

    @classmethod
    def load(cls, path: Path | None = None) -> RepairEngine:
        """The shipped policy with a user's file (ladders and budgets) laid over it."""
        return cls(Ladders.load(path), load_budgets(path))

    # -- the two entry points --------------------------------------------------------------------
    def recommend(
        self,
        state: dict[str, Any],
        trace: Trace,
        failures: list[Failure],
        *,
        session_key: str,
        now: float,
        options: DiagnoseOptions | None = None,
    ) -> Decision:
        """The recommendation for the current diagnosis of a session's trace.

        Open failures no longer among ``failures`` are resolved; the actionable failure is the first
        by :func:`model.core.findings.precedence` that is not resolved (the primary failure unless that
        one is), and the recommendation names it (``addresses``).
        """
        options = options or DiagnoseOptions()
        fstates: dict[str, dict[str, Any]] = state.setdefault("failures", {})
        state["options"] = options.model_dump(mode="json")
        if options.shadow:
            primary = primary_of(failures)
            rec = self.ladders.recommend(trace, primary, options=options)
            rec = rec.model_copy(update={"id": self._id(session_key, "shadow", len(trace.steps), 0),
                                         "addresses": failure_key(primary) if primary is not None else None})
            return Decision(rec, new=True)
        got_past = {failure_key(f) for f in failures if resolved_by_later_steps(trace, f)}
        present = {failure_key(f) for f in failures} - got_past
        reopened = self._recurred(fstates, failures, present)
        for key, fs in fstates.items():
            if fs["status"] == OPEN and key not in present:
                fs["status"] = RESOLVED
                fs["resolved_by"] = "later steps"
        actionable = [
            f
            for f in failures
            if failure_key(f) in present and fstates.get(failure_key(f), {}).get("status") != RESOLVED
        ]
        if not actionable:
            why = "no failure found" if not failures else "every failure found is resolved"
            if got_past:
                why += f" (later steps got past {', '.join(sorted(got_past))})"
            rec = self.ladders.recommend(trace, None, options=options)
            rec = rec.model_copy(
                update={
                    "id": self._id(session_key, "continue", len(trace.steps), 0),
                    "rationale": why,
                    "budgets": self._budgets_left(state, None, None),
                }
            )
            return Decision(rec, new=True)
        primary = primary_of(actionable)
        assert primary is not None
        key = failure_key(primary)
        standing = fstates.get(key)
        if key in reopened and standing is not None:  # its repair did not hold: the next rung
            return self._issue(state, standing, key, trace, options, session_key, now, new_rung=True)
        if standing is not None:  # open or handed off: the standing recommendation, no budget spent
            return Decision(
                Recommendation.model_validate({**standing["rec"], "addresses": key}),
                new=False,
                failure_key=key,
                rung=standing["rung"],
                attempt=standing["attempt"],
            )
        tkey = task_key(trace, primary.step)
        tasks: dict[str, dict[str, Any]] = state.setdefault("tasks", {})
        tasks.setdefault(tkey, {"first_failure_at": now, "latest_outcome_at": None, "recommendations": 0})
        fs = {
            "kind": primary.kind.value,
            "source_index": primary.source_index,
            "step": primary.step,
            "failure": primary.model_dump(mode="json"),
            "task": tkey,
            "rung": 0,
            "attempt": 1,
            "rungs_used": 0,
            "status": OPEN,
            "rec": None,
        }
        fstates[key] = fs
        return self._issue(state, fs, key, trace, options, session_key, now, new_rung=True)

    def on_outcome(
        self,
        state: dict[str, Any],
        rec_id: str,
        *,
        success: bool,
        trace: Trace,
        session_key: str,
        now: float,
    ) -> Decision | None:
        """Apply an outcome of recommendation ``rec_id``; returns the next recommendation when the
        failed one moves its failure up, else None (success, or a recommendation no longer current).
        """
        fstates: dict[str, dict[str, Any]] = state.setdefault("failures", {})
        found = next(
            ((k, fs) for k, fs in fstates.items() if (fs.get("rec") or {}).get("id") == rec_id), None
        )
        if found is None:
            return None
        key, fs = found
        task = state.setdefault("tasks", {}).get(fs["task"])
        if task is not None:
            task["latest_outcome_at"] = now
        if success:
            fs["status"] = RESOLVED
            fs["resolved_by"] = "outcome"
            fs["resolved_at_step"] = len(trace.steps)  # evidence past here later means it came back
            return None
        if fs["status"] == RESOLVED and fs.get("resolved_by") == "later steps":
            # The agent says its repair failed although later steps made the finding go (an error it
            # only told the user about is a signal then): the agent's word on its own repair wins.
            fs["status"] = OPEN
            fs["resolved_by"] = None
        if fs["status"] != OPEN:  # handed off (or resolved by an outcome): never climb past human_handoff
            return None
        options = DiagnoseOptions.model_validate(state.get("options") or {})
        ladder = self.ladders.ladder(FailureKind(fs["kind"]))
        rung = ladder[min(fs["rung"], len(ladder) - 1)]
        if fs["attempt"] < self._max_attempts(rung.strategy, rung.params):
            fs["attempt"] += 1
            return self._issue(state, fs, key, trace, options, session_key, now, new_rung=False)
        fs["rung"] += 1
        fs["attempt"] = 1
        return self._issue(state, fs, key, trace, options, session_key, now, new_rung=True)

    # -- internals -----------------------------------------------------------------------------
    @staticmethod
    def _recurred(fstates: dict[str, dict[str, Any]], failures: list[Failure], present: set[str]) -> set[str]:
        """Reopen failures an outcome resolved whose finding has grown since (a loop repeating after
        a rollback reported successful: the session keeps the undone steps, so the same finding
        gets a new repeat): open again, one rung up. Returns their keys."""
        out: set[str] = set()
        for f in failures:
            key = failure_key(f)
            fs = fstates.get(key)
            if key not in present or fs is None or fs["status"] != RESOLVED or "resolved_at_step" not in fs:
                continue
            reached = reach(f).step
            if reached is not None and reached >= int(fs["resolved_at_step"]):
                fs["status"] = OPEN
                fs["rung"] += 1
                fs["attempt"] = 1
                fs["failure"] = f.model_dump(mode="json")
                fs["resolved_by"] = None
                fs.pop("resolved_at_step")
                out.add(key)
        return out

    def _max_attempts(self, strategy: Strategy, params: dict[str, Any]) -> int:
        if strategy != Strategy.RETRY:
            return 1
        value = params.get("max_attempts", self.ladders.file.defaults.retry.max_attempts)
        return max(1, int(value))

    @staticmethod
    def _id(session_key: str, *parts: object) -> str:
        return uuid.uuid5(_ID_NAMESPACE, "|".join([session_key, *map(str, parts)])).hex

    def _budgets_left(
        self, state: dict[str, Any], fs: dict[str, Any] | None, now: float | None
    ) -> dict[str, Any]:
        b = self.budgets
        out: dict[str, Any] = {
            "session_replan_global_left": max(0, b.session_replan_global - int(state.get("replan_global", 0)))
        }
        if fs is not None:
            out["failure_rungs_left"] = max(0, b.failure_rungs - int(fs["rungs_used"]))
            task = (state.get("tasks") or {}).get(fs["task"])
            if task is not None:
                out["task_recommendations_left"] = max(
                    0, b.task_recommendations - int(task["recommendations"])
                )
                if now is not None:
                    spent = now - float(task["first_failure_at"])
                    out["task_recovery_s_left"] = round(max(0.0, b.task_recovery_s - spent), 3)
        return out

    def _spent(
        self, state: dict[str, Any], fs: dict[str, Any], strategy: Strategy, now: float, new_rung: bool
    ) -> str | None:
        """The name of the budget this recommendation would overspend, or None."""
        b = self.budgets
        task = state["tasks"][fs["task"]]
        if new_rung and fs["rungs_used"] >= b.failure_rungs:
            return f"per-failure budget spent: {b.failure_rungs} rungs"
        if task["recommendations"] >= b.task_recommendations:
            return f"per-task budget spent: {b.task_recommendations} recommendations"
        latest = max(now, float(task["latest_outcome_at"] or now))
        if latest - float(task["first_failure_at"]) > b.task_recovery_s:
            return f"per-task budget spent: {b.task_recovery_s:g} s of recovery"
        if (
            strategy == Strategy.REPLAN_GLOBAL
            and int(state.get("replan_global", 0)) >= b.session_replan_global
        ):
            return f"per-session budget spent: {b.session_replan_global} replan_global"
        return None

    def _usable(self, rung: Rung, fs: dict[str, Any], trace: Trace, options: DiagnoseOptions) -> bool:
        strategy = rung.strategy
        if rung.params.get("only_if_transient") and not is_transient(Failure.model_validate(fs["failure"])):
            return False  # e.g. retrying an HTTP 400: skipped here, so the rung after it is checked too
        if strategy == Strategy.SWITCH_TOOL:
            failure = Failure.model_validate(fs["failure"])
            tool = failure.details.get("tool")
            if tool is None and failure.step is not None and failure.step < len(trace.steps):
                tool = trace.steps[failure.step].tool_name
            return bool(options.tool_equivalents.get(str(tool or ""), []))
        if strategy == Strategy.FALLBACK_MODEL:
            return bool(options.fallback_models)
        return True

    def _issue(
        self,
        state: dict[str, Any],
        fs: dict[str, Any],
        key: str,
        trace: Trace,
        options: DiagnoseOptions,
        session_key: str,
        now: float,
        *,
        new_rung: bool,
    ) -> Decision:
        failure = Failure.model_validate(fs["failure"])
        ladder = self.ladders.ladder(failure.kind)
        skipped: list[str] = []
        while fs["rung"] < len(ladder) - 1 and not self._usable(ladder[fs["rung"]], fs, trace, options):
            skipped.append(ladder[fs["rung"]].strategy.value)
            fs["rung"] += 1
        rung_idx = min(fs["rung"], len(ladder) - 1)
        strategy = ladder[rung_idx].strategy
        reason = self._spent(state, fs, strategy, now, new_rung)
        if reason is None and strategy == Strategy.HUMAN_HANDOFF:
            reason = "end of the ladder" if rung_idx > 0 else f"{failure.kind.value} goes to a human at once"
        task = state["tasks"][fs["task"]]
        if reason is not None:
            rec = self.ladders.recommend(trace, failure, options=options, rung=len(ladder) - 1)
            rec = rec.model_copy(
                update={
                    "params": {**rec.params, "reason": reason},
                    "rationale": f"{rec.rationale.split(';')[0]}; {reason}",
                    "next": [],
                }
            )
            fs["rung"] = len(ladder) - 1
            rung_idx = fs["rung"]
        else:
            rec = self.ladders.recommend(trace, failure, options=options, rung=rung_idx, attempt=fs["attempt"])
            if rec.strategy != Strategy.HUMAN_HANDOFF:
                task["recommendations"] += 1
                if new_rung:
                    fs["rungs_used"] += 1
                if rec.strategy == Strategy.REPLAN_GLOBAL:
                    state["replan_global"] = int(state.get("replan_global", 0)) + 1
        if skipped:
            rec = rec.model_copy(
                update={"rationale": f"{rec.rationale}; skipped {', '.join(skipped)} (nothing to switch to, or a permanent error)"}
            )
        fs["status"] = HANDOFF if rec.strategy == Strategy.HUMAN_HANDOFF else OPEN
        rec = rec.model_copy(
            update={
                "id": self._id(session_key, key, rung_idx, fs["attempt"]),
                "budgets": self._budgets_left(state, fs, now),
                "addresses": key,
            }
        )
        fs["rec"] = rec.model_dump(mode="json")
        return Decision(rec, new=True, failure_key=key, rung=rung_idx, attempt=fs["attempt"])


__all__ = ["Budgets", "Decision", "Reach", "RepairEngine", "failure_key", "load_budgets", "reach", "task_key"]
