"""Incremental diagnosis of a running session: an append costs the same at step 4,000 as at step 10.

A session grows one append at a time. Re-running every detector over the whole trace on each
append makes the *n*-th append cost O(*n*); here the detectors read a **window** instead: the last
``window`` steps, preceded by the session's context (its system messages and the user message that
set the current task). What the window finds on its own steps replaces what the previous append
found there; findings on steps that have slid out of the window are **frozen**: kept, as the last
window that still held them saw them. The classifier scores each new step once, on the same
window, and its findings are kept too. A rule finding is frozen half a window after it left
the window's newest half, so it was last computed with half a window on either side of it. The state is a JSON dict stored in the session (any worker
can continue it).

- A session of at most ``window`` steps is diagnosed exactly as the whole trace would be (the
  window is the whole trace).
- Beyond that, what lies further apart than about half a window is not seen together: an error
  ignored more than that later, a loop whose repeats are further apart, a tool error recovered
  later than that (it stays reported as not recovered), the classifier's repeat counts and
  grounding from steps out of the window. A recovered failure's ``recovered_by_step`` names the
  recovery the window saw (the whole trace names the tool's last success, wherever it is).
- The run scorer's ``attribution`` is that of the window (it reads every message it is given);
  ``failure_probability`` reads the session's findings (measured rule failures, raw rule signals)
  and the classifier's per-kind maxima over every step it scored; in a session they decide nothing.
- Findings are renumbered from the window to the session (``step``, every ``*_step`` /
  ``*_steps`` detail, "step N" in the evidence).

>>> from model.data.builder import make_trace
>>> from model.diagnosis.diagnoser import Diagnoser
>>> from model.core.kinds import FailureKind
>>> t = make_trace(FailureKind.TOOL_ERROR, seed=1)
>>> state: dict = {}
>>> inc = IncrementalDiagnoser(Diagnoser(), window=64)
>>> inc.diagnose(t, state).primary.kind == Diagnoser().diagnose(t).primary.kind
True
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import TypeAdapter

from model.core.coverage import assess_more
from model.core.findings import Attribution, DiagnosisResponse, Finding
from model.core.options import DiagnoseOptions
from model.core.schema import StepKind, Trace
from model.diagnosis.decision import Context
from model.diagnosis.diagnoser import RUNSCORE, Diagnoser, zero_shot_inputs
from model.diagnosis.ladders import language_more

#: The session's context kept in front of a window: at most this many system messages.
MAX_CONTEXT_SYSTEM = 4

_STEP_REF = re.compile(r"\bstep (\d+)")
#: A session's kept findings (JSON) read back in one call (a third less than one ``model_validate`` each).
_FINDINGS: TypeAdapter[list[Finding]] = TypeAdapter(list[Finding])


def window_of(
    trace: Trace, size: int, context: dict[str, Any] | None = None
) -> tuple[Trace, list[int], int]:
    """The window of ``trace``: ``(window trace, index map, lo)``.

    ``index map[j]`` is the session index of the window's step ``j``; the window's own steps are
    the session's ``steps[lo:]``, after the context (system messages and the last user message
    before ``lo``). With ``len(trace.steps) <= size`` the window is the trace itself.
    ``context`` (JSON, kept by the caller between appends) remembers the context found so far,
    so that only the steps that slid out of the window since are read.
    """
    n = len(trace.steps)
    lo = max(0, n - size)
    if lo == 0:
        return trace, list(range(n)), 0
    ctx = context if context is not None else {}
    if int(ctx.get("upto", 0)) > lo:
        ctx.clear()
    system: list[int] = list(ctx.get("system", []))
    user: int | None = ctx.get("user")
    for i in range(int(ctx.get("upto", 0)), lo):
        kind = trace.steps[i].kind
        if kind is StepKind.SYSTEM and len(system) < MAX_CONTEXT_SYSTEM:
            system.append(i)
        elif kind is StepKind.USER_INPUT:
            user = i
    ctx.update(upto=lo, system=system, user=user)
    index = [*system, *([user] if user is not None else [])]
    index = sorted(index) + list(range(lo, n))
    win = trace.model_copy(update={"steps": [trace.steps[i] for i in index]})
    return win, index, lo


def remap(finding: Finding, index: Sequence[int]) -> Finding:
    """``finding`` on a window, renumbered to the session through ``index``."""
    if index and index[-1] == len(index) - 1:  # the window is the whole trace
        return finding

    def at(j: int) -> int:
        return index[j] if 0 <= j < len(index) else j

    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and (key == "step" or key.endswith("_step")):
            return at(value)
        if isinstance(value, list):
            if key.endswith("_steps"):
                return [at(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        return value

    return finding.model_copy(
        update={
            "step": at(finding.step) if finding.step is not None else None,
            "details": walk(finding.details),
            "evidence": _STEP_REF.sub(lambda m: f"step {at(int(m.group(1)))}", finding.evidence),
        }
    )


class IncrementalDiagnoser:
    """A :class:`~model.diagnosis.diagnoser.Diagnoser` that diagnoses a growing session window by window.

    Parameters
    ----------
    diagnoser:
        Its detectors, policy and fusion are used as they are.
    window:
        How many of the newest steps the detectors re-read on each append.
    """

    def __init__(self, diagnoser: Diagnoser, *, window: int = 64) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1; got {window}")
        self.diagnoser = diagnoser
        self.window = window

    def diagnose(self, trace: Trace, state: dict[str, Any], options: DiagnoseOptions | None = None) -> DiagnosisResponse:
        """The session's whole answer after an append (:meth:`Diagnoser.decide` with this window);
        ``state`` (the session's) is updated."""
        ctx = Context(options=options or DiagnoseOptions(), window=SessionWindow(self, state), state=state)
        return self.diagnoser.decide(trace, ctx).response

    def assess(
        self,
        trace: Trace,
        state: dict[str, Any],
        options: DiagnoseOptions | None = None,
        *,
        alarms: Iterable[Finding] = (),
    ) -> tuple[DiagnosisResponse, Trace]:
        """The session ``trace``'s findings after an append, fused with ``alarms``, and the
        probability so far; ``state`` (the session's) is updated. Returns the response (its primary and
        recommendation are :meth:`Diagnoser.decide`'s to set) and the trace in the language the
        recommendations speak.

        ``options.detectors`` names the detectors as for :meth:`Diagnoser.decide`; a classifier
        among them with ``inspect_step`` scores only the steps it has not scored before. The run
        scorer (``runscore``), when the diagnoser has one, reports ``failure_probability`` and
        ``attribution`` of the window and decides nothing (the run is not over).
        """
        options = options or DiagnoseOptions()
        dets = self.diagnoser._detectors_for(options)
        clf = next((d for d in dets if d.name == "classifier" and callable(getattr(d, "inspect_step", None))), None)
        rules = [d for d in dets if d is not clf]
        win, index, lo = window_of(trace, self.window, state.setdefault("context", {}))
        found = self._rule_findings(trace, win, index, lo, rules, options, state)
        if clf is not None:
            found += self._classifier_findings(clf, trace, win, index, lo, state)
        # the recommendation's language from the user's words, read once (not the whole session's)
        lang = language_more(trace, state.setdefault("language", {}))
        view = trace if trace.language else trace.model_copy(update={"language": lang})
        resp = self.diagnoser._assess(
            view,
            options.model_copy(update={"detectors": []}),
            alarms=[*found, *alarms],
            run_verdict=False,
            assessed=assess_more(trace, state.setdefault("coverage", {})),  # the new steps only
        )
        resp.detector_versions = {d.name: d.version for d in dets}
        scorer = self.diagnoser.runscorer
        if scorer is not None and (options.detectors is None or RUNSCORE in options.detectors):
            # The attribution reads every message of what it is given: the window, not the session.
            rule_conf = None
            for f in resp.failures:
                if f.detector in {d.name for d in rules}:
                    conf, extra = scorer.rule_confidence(f.detector, f.confidence)
                    if conf >= 0.5 and "demoted" not in extra:
                        rule_conf = conf if rule_conf is None else max(rule_conf, conf)
                elif clf is not None and f.detector == clf.name:
                    rule_conf = f.confidence if rule_conf is None else max(rule_conf, f.confidence)
            maxima = (state.get("classifier") or {}).get("maxima") if clf is not None else None
            _, ev = zero_shot_inputs([f for f in found if f.detector != "classifier"], [], [], maxima, resp.coverage)
            scored = scorer.score(win, rule_confidence=rule_conf, evidence=ev)
            resp.failure_probability = scored.failure_probability
            if scored.attribution:
                at = dict(scored.attribution)
                at["step"] = index[at["step"]] if 0 <= at["step"] < len(index) else at["step"]
                resp.attribution = Attribution(**at)
            resp.detector_versions[RUNSCORE] = scorer.version
        return resp, view

    # -- rules: frozen findings before the window, the window's own ------------------------------
    def _rule_findings(
        self,
        trace: Trace,
        win: Trace,
        index: list[int],
        lo: int,
        rules: Sequence[Any],
        options: DiagnoseOptions,
        state: dict[str, Any],
    ) -> list[Finding]:
        fingerprint = _fingerprint(rules, options, self.window)
        cached = state.get("rules") or {}
        n = len(trace.steps)
        # Findings before ``cut`` are frozen. It trails the window's start by half a window, so a
        # finding is last computed with half a window of steps on either side of it.
        cut = 0 if lo == 0 else lo + self.window // 2
        if cached.get("fingerprint") != fingerprint or not int(cached.get("cut", 0)) <= cut or int(cached.get("n", 0)) > n:
            # New settings (or a trace replaced under the session): read the whole trace once.
            whole = self.diagnoser._run(trace, rules)  # one graph for every rule (_run shares it)
            frozen = [f for f in whole if f.step is not None and f.step < cut]
            frozen_json = [f.model_dump(mode="json") for f in frozen]
        else:
            # A frozen finding's JSON is kept as it was (its dump would give it back), not dumped again.
            frozen_json = list(cached.get("frozen", []))
            frozen = _FINDINGS.validate_python(frozen_json)
            recent_json = cached.get("recent", [])
            for f, raw in zip(_FINDINGS.validate_python(recent_json), recent_json, strict=True):
                if f.step is not None and f.step < cut:
                    frozen.append(f)
                    frozen_json.append(raw)
        first_own = len(index) - (n - lo)  # window steps before this are the context
        recent = []
        found = self.diagnoser._run(win, rules)  # the window's graph built once (_run shares it)
        for f in found:
            if f.step is not None and f.step < first_own:
                continue
            g = remap(f, index)
            if g.step is None or g.step >= cut:
                recent.append(g)
        state["rules"] = {
            "fingerprint": fingerprint,
            "cut": cut,
            "n": n,
            "frozen": frozen_json,
            "recent": [f.model_dump(mode="json") for f in recent],
        }
        return frozen + recent

    # -- the classifier: each step scored once, on its window -------------------------------------
    def _classifier_findings(
        self, clf: Any, trace: Trace, win: Trace, index: list[int], lo: int, state: dict[str, Any]
    ) -> list[Finding]:
        version = f"{getattr(clf, 'model_version', None) or clf.version}@w{self.window}"
        cached = state.get("classifier") or {}
        n = len(trace.steps)
        if cached.get("model_version") != version or int(cached.get("n", 0)) > n:
            cached = {"model_version": version, "n": 0, "findings": []}
        kept = cached["findings"]  # each step's findings, as JSON: kept as they are (not dumped again)
        found = _FINDINGS.validate_python(kept)
        maxima: dict[str, float] = dict(cached.get("maxima") or {})
        scored = getattr(clf, "inspect_step_scored", None)

        def inspect(t: Trace, j: int) -> list[Finding]:
            if not callable(scored):
                return list(clf.inspect_step(t, j))
            out, m = scored(t, j)
            for k, v in m.items():  # the zero-shot probability's evidence: each kind's highest so far
                maxima[k] = max(v, maxima.get(k, 0.0))
            return list(out)

        first_own = len(index) - (n - lo)
        for i in range(int(cached["n"]), n):
            if i >= lo:
                found.extend(remap(f, index) for f in inspect(win, first_own + i - lo))
            else:  # a step before the window that was never scored (settings changed): its own window
                w, idx, _ = window_of(trace.model_copy(update={"steps": trace.steps[: i + 1]}), self.window)
                found.extend(remap(f, idx) for f in inspect(w, len(idx) - 1))
        state["classifier"] = {
            "model_version": version,
            "n": n,
            "findings": [*kept, *(f.model_dump(mode="json") for f in found[len(kept):])],
            "maxima": maxima,
        }
        return found


class SessionWindow:
    """A running session read window by window (:class:`model.diagnosis.decision.Window`), for
    :meth:`Diagnoser.decide`: ``incremental``'s window over the session ``state`` (updated in place),
    running the ``detectors`` named (default: those of the request's options).

    >>> from model.data.builder import make_trace
    >>> from model.diagnosis.decision import Context
    >>> t = make_trace("loop", seed=0)
    >>> state: dict = {}
    >>> d = Diagnoser()
    >>> v = d.decide(t, Context(window=SessionWindow(IncrementalDiagnoser(d), state), state=state))
    >>> v.response.primary.kind.value
    'loop'
    """

    def __init__(self, incremental: IncrementalDiagnoser, state: dict[str, Any],
                 detectors: Sequence[str] | None = None) -> None:
        self.incremental = incremental
        self.state = state
        self.detectors = None if detectors is None else list(detectors)

    @property
    def owner(self) -> Diagnoser:
        return self.incremental.diagnoser

    def assess(self, trace: Trace, options: DiagnoseOptions,
               alarms: Sequence[Finding]) -> tuple[DiagnosisResponse, Trace]:
        if self.detectors is not None:
            options = options.model_copy(update={"detectors": self.detectors})
        return self.incremental.assess(trace, self.state, options, alarms=alarms)


def _fingerprint(rules: Sequence[Any], options: DiagnoseOptions, window: int) -> str:
    """What the cached rule findings depend on besides the steps: detectors, their settings, window."""
    return _digest(window, tuple((d.name, str(d.version), repr(getattr(d, "get_params", dict)())) for d in rules))


@functools.lru_cache(maxsize=256)
def _digest(window: int, detectors: tuple[tuple[str, str, str], ...]) -> str:
    parts = {"window": window, "detectors": [list(d) for d in detectors]}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


__all__ = ["IncrementalDiagnoser", "SessionWindow", "remap", "window_of"]
