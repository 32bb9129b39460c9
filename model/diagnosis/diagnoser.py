"""Diagnosis: run the detectors over a trace, fuse their findings, recommend a repair.

Fusion (docs/architecture.md): a finding at or above its kind's threshold is a failure; below it, a
signal (reported, not acted on). Findings of one kind on one ``source_index`` merge, keeping the
highest confidence and every detector's evidence. The primary failure is the first by
:func:`model.core.findings.precedence`: the most severe, then the earliest (the root cause before its
symptom). :meth:`Diagnoser.decide` is the one call that gives the whole answer (:mod:`model.diagnosis.decision`).

With a run scorer (:mod:`model.scoring.runscore`, fitted on real runs), every diagnosis also carries
``failure_probability`` (the zero-shot recipe, :mod:`model.scoring.runscore.zeroshot`: the prior,
the highest measured failure confidence, the classifier's per-kind maxima and the rule signals;
:func:`zero_shot_inputs`) and ``attribution``; ``healthy`` is false when a failure passes its kind's
threshold **or** ``failure_probability`` reaches the scorer's operating point. In the second case
the primary failure sits at ``attribution.step`` (detector ``runscore``), of the most likely kind
there (:func:`attributed_kind`), with confidence ``failure_probability``, and follows that kind's
ladder. Without a failure, ``healthy`` is ``None`` (unknown) when an agent step's text is missing
or only a redaction placeholder (:mod:`model.core.coverage`).

>>> from model.core.schema import Step, Trace
>>> t = Trace(steps=[Step(kind="user_input", content="2+2?"), Step(kind="final_output", content="4")])
>>> Diagnoser().diagnose(t).healthy
True
"""

from __future__ import annotations

import importlib.metadata
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from model.core.coverage import Coverage, assess, verdict
from model.core.errors import TooLargeError, UnknownDetectorError
from model.core.findings import (
    Attribution,
    DiagnosisResponse,
    Failure,
    Finding,
    Recommendation,
    primary_of,
    step_order,
)
from model.core.kinds import KIND_INFO, FailureKind, Strategy
from model.core.options import DiagnoseOptions
from model.core.schema import Trace
from model.core.shared_graphs import shared_graphs
from model.detectors.base import TraceDetector
from model.detectors.catalog import TRACE_DETECTORS, default_detectors, make_detector
from model.diagnosis.decision import Context, Verdict, conclude
from model.diagnosis.repair_engine import RepairEngine
from model.diagnosis.run_verdict import RUNSCORE, attributed_kind, run_failure
from model.importers.spans import unkeyed_warning
from model.scoring.classifier.runtime import DEFAULT_THREADS

if TYPE_CHECKING:
    from model.scoring.runscore.model import RunScorer


#: A finding at or above its kind's threshold is a failure. Rules report calibrated constants; a
#: learned detector with its own tuned thresholds reports confidences relative to them (the
#: classifier maps its threshold to 0.5), so one threshold per kind serves every detector.
DEFAULT_THRESHOLDS: dict[FailureKind, float] = {kind: 0.5 for kind in FailureKind}

#: Detectors whose construction depends on the request: detector name → option names passed on.
REQUEST_PARAMS: dict[str, tuple[str, ...]] = {"disallowed_tool": ("allowed_tools",)}



def package_version() -> str:
    try:
        return importlib.metadata.version("agent-triage-service")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return "0.0.0+local"


def _merge_key(f: Finding) -> tuple[FailureKind, int | None, int | None]:
    # Findings with no source_index (trace-level) merge by kind alone.
    return (f.kind, f.source_index, None if f.source_index is not None else f.step)


def fuse(
    findings: Iterable[Finding], thresholds: Mapping[FailureKind, float] | None = None
) -> tuple[list[Failure], list[Failure], Failure | None]:
    """Merge findings, split them into failures and signals, and pick the primary failure.

    Returns ``(failures, signals, primary)``, failures and signals ordered by step.
    """
    thr = dict(DEFAULT_THRESHOLDS)
    if thresholds:
        thr.update(thresholds)
    merged: dict[tuple[FailureKind, int | None, int | None], list[Finding]] = {}
    for f in findings:
        merged.setdefault(_merge_key(f), []).append(f)

    failures: list[Failure] = []
    signals: list[Failure] = []
    for group in merged.values():
        best = max(group, key=lambda f: f.confidence)
        info = KIND_INFO[best.kind]
        detectors = list(dict.fromkeys(f.detector for f in sorted(group, key=lambda f: -f.confidence)))
        evidence = " | ".join(dict.fromkeys(f"{f.detector}: {f.evidence}" for f in group if f.evidence))
        details: dict[str, Any] = {}
        for f in sorted(group, key=lambda f: f.confidence):
            details.update(f.details)  # the most confident detector's details win on a clash
        steps = [f.step for f in group if f.step is not None]
        fused = Failure(
            kind=best.kind,
            category=info.category,
            severity=info.severity,
            confidence=best.confidence,
            detector=best.detector,
            detectors=detectors,
            step=min(steps) if steps else None,
            source_index=best.source_index,
            span_id=best.span_id or next((f.span_id for f in group if f.span_id), None),
            evidence=evidence,
            details=details,
        )
        # a rule demoted on real runs (it fired on too many successful ones) only ever signals
        demoted = bool(best.details.get("demoted"))
        (failures if best.confidence >= thr[best.kind] and not demoted else signals).append(fused)

    failures.sort(key=step_order)
    signals.sort(key=step_order)
    return failures, signals, primary_of(failures)


def zero_shot_inputs(raw: Iterable[Finding], failures: Sequence[Failure], detectors: Iterable[str],
                     maxima: Mapping[str, float] | None, coverage: Coverage | None = None
                     ) -> tuple[float | None, dict[str, float]]:
    """What the zero-shot ``failure_probability`` reads of a diagnosis: the highest confidence among
    the failures the trace ``detectors`` raised (measured on real runs; ``None`` without one), and
    the evidence features (:func:`model.scoring.runscore.zeroshot.evidence`): the classifier's
    per-kind ``maxima`` (``None``: it did not run) and the strongest *raw* rule signal. When
    ``coverage`` says some text was not recorded or is redacted, the classifier's maxima are left
    out (it scored placeholders, not the agent's words): its part counts as its training mean."""
    from model.scoring.runscore.zeroshot import evidence

    if coverage is not None and (coverage.without_content or coverage.redacted):
        maxima = None
    names = set(detectors)
    rule_conf = max((f.confidence for f in failures if f.detector in names), default=None)
    signals = [f for f in raw if f.confidence < DEFAULT_THRESHOLDS[f.kind]]
    return rule_conf, evidence(signals, maxima)


class Diagnoser:
    """Runs detectors and the repair policy. Build once (it holds the detectors), call :meth:`decide` per trace.

    Parameters
    ----------
    detectors:
        Pre-built trace detectors to use by default (e.g. the classifier, loaded once at start-up).
        Default: every registered trace detector except the opt-in ones.
    engine:
        The repair engine (ladders and budgets); default :meth:`RepairEngine.load` (the shipped policy).
    max_steps:
        Traces longer than this raise :class:`~model.core.errors.TooLargeError`.
    model_version:
        Reported in every response; default the classifier's version when one is among the
        detectors, else ``rules-<package version>`` (``+<run scorer version>`` with a run scorer).
    runscorer:
        The run scorer (``failure_probability``, ``attribution``); ``None``: neither is reported.
    """

    def __init__(
        self,
        detectors: Sequence[TraceDetector] | None = None,
        *,
        engine: RepairEngine | None = None,
        max_steps: int = 5000,
        model_version: str | None = None,
        runscorer: RunScorer | None = None,
    ) -> None:
        if detectors is None:
            detectors = default_detectors()
        self.detectors: dict[str, TraceDetector] = {d.name: d for d in detectors}
        # opt-in detectors a request named (e.g. the classifier), built on first use; never added to
        # ``detectors``, the set every request without ``options.detectors`` runs
        self._named: dict[str, TraceDetector] = {}
        self._lock = threading.Lock()
        self.engine = engine or RepairEngine.load()
        self.max_steps = max_steps
        if model_version is None:
            clf = self.detectors.get("classifier")
            model_version = str(getattr(clf, "model_version", None) or f"rules-{package_version()}")
            if runscorer is not None:
                model_version += f"+{runscorer.version}"
        self.model_version = model_version
        self.runscorer = runscorer

    @classmethod
    def with_shipped_models(
        cls,
        *,
        classifier: bool = True,
        runscore: bool = True,
        path: str | Path | None = None,
        threads: int = DEFAULT_THREADS,
        runscorer: RunScorer | None = None,
        **kwargs: Any,
    ) -> Diagnoser:
        """Every rule, plus the shipped classifier and run scorer when their artefacts are present
        (what the service and ``triage diagnose`` run). ``path``: a folder holding them instead of
        ``model/artifacts``; ``runscorer``: a fitted one instead of the shipped file."""
        from model.scoring.runscore.model import ARTIFACT, RunScorer

        detectors = default_detectors()
        if classifier and "classifier" in TRACE_DETECTORS:
            params: dict[str, Any] = {"threads": threads}
            if path is not None:
                params["path"] = path
            det = make_detector("classifier", **params)
            available = getattr(det, "available", None)
            if not callable(available) or available():
                load = getattr(det, "load", None)
                if callable(load):
                    load()
                detectors.append(det)
        if runscorer is None and runscore:
            file = Path(path) / ARTIFACT.name if path is not None else ARTIFACT
            runscorer = RunScorer.load(file) if file.is_file() else None
        return cls(detectors, runscorer=runscorer if runscore else None, **kwargs)

    def _detectors_for(self, options: DiagnoseOptions) -> list[TraceDetector]:
        names = list(self.detectors) if options.detectors is None else [
            n for n in options.detectors if n != RUNSCORE]
        chosen: list[TraceDetector] = []
        for name in dict.fromkeys(names):
            if name not in self.detectors and name not in TRACE_DETECTORS:
                valid = ", ".join(sorted(set(self.detectors) | set(TRACE_DETECTORS) | {RUNSCORE}))
                raise UnknownDetectorError(
                    f"unknown detector {name!r}; valid names: {valid}", path="options.detectors"
                )
            request_params = {
                p: getattr(options, p) for p in REQUEST_PARAMS.get(name, ()) if getattr(options, p) is not None
            }
            if request_params:
                chosen.append(make_detector(name, **request_params))
            elif name in self.detectors:
                chosen.append(self.detectors[name])
            else:  # named by the request but not in the default set: built once, kept apart from it
                with self._lock:
                    det = self._named.get(name)
                    if det is None:
                        det = self._named[name] = make_detector(name)
                chosen.append(det)
        return chosen

    def _measured(self, f: Finding) -> Finding:
        """A rule's finding with its confidence estimated on real runs (P(run failed | it fired),
        ``details.p_run_failed``; a demoted rule's finding only signals):
        :meth:`model.scoring.runscore.model.RunScorer.rule_confidence`."""
        assert self.runscorer is not None
        if f.confidence < DEFAULT_THRESHOLDS[f.kind]:
            return f  # a signal: the rule's precision was measured on its failures only
        conf, extra = self.runscorer.rule_confidence(f.detector, f.confidence)
        if not extra:
            return f
        return f.model_copy(update={"confidence": conf, "details": {**f.details, **extra}})

    def findings(self, trace: Trace, options: DiagnoseOptions | None = None) -> list[Finding]:
        """Every detector's raw findings, in detector order."""
        return self.scored_findings(trace, options)[0]

    def scored_findings(self, trace: Trace, options: DiagnoseOptions | None = None
                        ) -> tuple[list[Finding], dict[str, float] | None]:
        """Every detector's raw findings, and the step classifier's per-kind maxima over the agent's
        steps (``None`` when no classifier ran): what :func:`zero_shot_inputs` reads."""
        return self._run_scored(trace, self._detectors_for(options or DiagnoseOptions()))

    def _run(self, trace: Trace, detectors: Sequence[TraceDetector]) -> list[Finding]:
        return self._run_scored(trace, detectors)[0]

    def _run_scored(self, trace: Trace, dets: Sequence[TraceDetector]
                    ) -> tuple[list[Finding], dict[str, float] | None]:
        if len(trace.steps) > self.max_steps:
            raise TooLargeError(
                f"trace has {len(trace.steps)} steps; the limit is {self.max_steps}", path="trace.steps"
            )
        out: list[Finding] = []
        maxima: dict[str, float] | None = None
        if not dets:  # a session's own fusion runs none (its findings come as alarms)
            return out, maxima
        with shared_graphs():  # one execution graph for the trace, read by every rule
            for det in dets:
                scored = getattr(det, "inspect_scored", None)
                if callable(scored):
                    found, m = scored(trace)
                    out.extend(found)
                    maxima = {**(maxima or {}), **m}
                else:
                    out.extend(det.inspect(trace))
        return out, maxima

    def _assess(
        self,
        trace: Trace,
        options: DiagnoseOptions,
        *,
        alarms: Iterable[Finding] = (),
        run_threshold: float | None = None,
        run_verdict: bool = True,
        assessed: tuple[Coverage, list[str]] | None = None,
    ) -> DiagnosisResponse:
        """The detectors' findings fused with ``alarms`` (a stream's ``degradation``), and the run
        scorer's probability: a response whose primary and recommendation :func:`conclude` sets.

        ``run_threshold`` replaces the run scorer's operating point (relative to the agent's own runs)
        only where it is higher; ``run_verdict=False`` reports ``failure_probability`` and
        ``attribution`` without letting them decide ``healthy`` (a running session: its run is not
        over); ``assessed``: :func:`model.core.coverage.assess` of ``trace`` when the caller has it (a
        session counts only its new steps: :func:`model.core.coverage.assess_more`).
        """
        dets = self._detectors_for(options)
        raw, maxima = self._run_scored(trace, dets)
        findings = list(raw)
        use_runscore = self.runscorer is not None and (options.detectors is None or RUNSCORE in options.detectors)
        if use_runscore and self.runscorer is not None and self.runscorer.rule_stats_:
            findings = [self._measured(f) for f in findings]
        findings.extend(alarms)
        failures, signals, primary = fuse(findings)
        versions = {d.name: d.version for d in dets}
        probability: float | None = None
        attribution: Attribution | None = None
        coverage, warnings = assess(trace) if assessed is None else (assessed[0], list(assessed[1]))
        if use_runscore and self.runscorer is not None:
            rule_conf, ev = zero_shot_inputs(raw, failures, {d.name for d in dets}, maxima, coverage)
            scored = self.runscorer.score(trace, rule_confidence=rule_conf, evidence=ev)
            probability = scored.failure_probability
            attribution = Attribution(**scored.attribution) if scored.attribution else None
            versions[RUNSCORE] = self.runscorer.version
            thr = self.runscorer.threshold
            if run_threshold is not None:
                # zero-shot, the probability turns `healthy` false only at the fixed low-false-alarm
                # operating point or above it (issue 20, item 7): a caller's point relative to the
                # agent's own runs flags its top decile by construction (≈ 10 % of its successful
                # runs), so it may raise the bar, never lower it
                thr = max(thr, run_threshold)
            if run_verdict and not failures and probability is not None and attribution is not None \
                    and probability >= thr:
                primary = run_failure(trace, attribution, probability, thr, signals)
                failures = [primary]
        joined = unkeyed_warning(trace)  # a run read from traces naming no session: say so first
        if joined:
            warnings.insert(0, joined)
        return DiagnosisResponse(
            trace_id=trace.id,
            model_version=self.model_version,
            detector_versions=versions,
            healthy=verdict(coverage, failures=len(failures)),
            failure_probability=probability,
            attribution=attribution,
            failures=failures,
            signals=signals,
            primary=primary,
            recommendation=Recommendation(id="", strategy=Strategy.CONTINUE),  # conclude() decides it
            steps=len(trace.steps),
            coverage=coverage,
            warnings=warnings,
        )

    def decide(self, trace: Trace, context: Context | None = None) -> Verdict:
        """The whole answer on ``trace``: what failed, which failure comes first, how likely the run
        failed and where, and what the agent should do — given ``context`` (:class:`~model.diagnosis.decision.Context`:
        the agent's model, alarms, repair state and budgets, the request's options; default a new
        agent's first run). Every door calls this, once per run or append.

        Raises :class:`~model.core.errors.TooLargeError` past ``max_steps`` and
        :class:`~model.core.errors.UnknownDetectorError` for an unknown name in ``options.detectors``.
        """
        ctx = context if context is not None else Context()
        if ctx.window is None:
            resp = self._assess(trace, ctx.options, alarms=ctx.alarms, run_threshold=ctx.run_threshold)
            view = trace
        else:
            if ctx.window.owner is not self:
                raise ValueError("the session window runs another diagnoser's detectors; decide on that one")
            resp, view = ctx.window.assess(trace, ctx.options, ctx.alarms)
        recipe = self.runscorer.recipe if self.runscorer is not None else None
        return conclude(resp, trace, view, ctx, self.engine, recipe)

    def diagnose(self, trace: Trace, options: DiagnoseOptions | None = None) -> DiagnosisResponse:
        """:meth:`decide` on a new agent's first run with ``options``: its response."""
        return self.decide(trace, Context(options=options or DiagnoseOptions())).response

__all__ = ["DEFAULT_THRESHOLDS", "RUNSCORE", "Diagnoser", "attributed_kind", "fuse", "package_version", "run_failure",
           "zero_shot_inputs"]
