"""Diagnosis: run the detectors over a trace, fuse their findings, recommend a repair.

Fusion (ARCHITECTURE.md): a finding at or above its kind's threshold is a failure; below it, a
signal (reported, not acted on). Findings of one kind on one ``source_index`` merge, keeping the
highest confidence and every detector's evidence. The primary failure is the earliest among those
of the highest severity: the root cause before its symptom. Healthy ⇔ no failure.

>>> from model.schema import Step, Trace
>>> t = Trace(steps=[Step(kind="user_input", content="2+2?"), Step(kind="final_output", content="4")])
>>> Diagnoser().diagnose(t).healthy
True
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from model.detectors import TRACE_DETECTORS, make_detector
from model.detectors.base import TraceDetector
from model.errors import TooLargeError, UnknownDetectorError
from model.findings import DiagnosisResponse, Failure, Finding
from model.kinds import KIND_INFO, SYMPTOM_KINDS, FailureKind
from model.options import DiagnoseOptions
from model.repair import Policy
from model.schema import Trace

#: A finding at or above its kind's threshold is a failure. Rules report calibrated constants; a
#: learned detector with its own tuned thresholds reports confidences relative to them (the
#: classifier maps its threshold to 0.5), so one threshold per kind serves every detector.
DEFAULT_THRESHOLDS: dict[FailureKind, float] = {kind: 0.5 for kind in FailureKind}

#: Detectors whose construction depends on the request: detector name → option names passed on.
REQUEST_PARAMS: dict[str, tuple[str, ...]] = {"disallowed_tool": ("allowed_tools",)}

#: Detectors left out of the default set (too slow for every request, or need an artefact);
#: they run when named in ``options.detectors`` or passed to :class:`Diagnoser` explicitly.
OPT_IN_DETECTORS: frozenset[str] = frozenset({"classifier"})


def package_version() -> str:
    try:
        return importlib.metadata.version("agent-triage")
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
        (failures if best.confidence >= thr[best.kind] else signals).append(fused)

    def order(f: Failure) -> tuple[int, int, int]:
        step = f.step if f.step is not None else 1 << 30
        return (step, int(f.kind in SYMPTOM_KINDS), list(FailureKind).index(f.kind))

    failures.sort(key=order)
    signals.sort(key=order)
    primary = None
    if failures:
        top = max(f.severity.rank for f in failures)
        primary = min((f for f in failures if f.severity.rank == top), key=order)
    return failures, signals, primary


class Diagnoser:
    """Runs detectors and the repair policy. Build once (it holds the detectors), call per trace.

    Parameters
    ----------
    detectors:
        Pre-built trace detectors to use by default (e.g. the classifier, loaded once at start-up).
        Default: every registered trace detector except the opt-in ones.
    policy:
        The repair policy; default :meth:`Policy.load`.
    max_steps:
        Traces longer than this raise :class:`~model.errors.TooLargeError`.
    model_version:
        Reported in every response; default the classifier's version when one is among the
        detectors, else ``rules-<package version>``.
    """

    def __init__(
        self,
        detectors: Sequence[TraceDetector] | None = None,
        *,
        policy: Policy | None = None,
        max_steps: int = 5000,
        model_version: str | None = None,
    ) -> None:
        if detectors is None:
            detectors = [make_detector(n) for n in sorted(TRACE_DETECTORS) if n not in OPT_IN_DETECTORS]
        self.detectors: dict[str, TraceDetector] = {d.name: d for d in detectors}
        self.policy = policy or Policy.load()
        self.max_steps = max_steps
        if model_version is None:
            clf = self.detectors.get("classifier")
            model_version = str(getattr(clf, "model_version", None) or f"rules-{package_version()}")
        self.model_version = model_version

    def _detectors_for(self, options: DiagnoseOptions) -> list[TraceDetector]:
        names = list(self.detectors) if options.detectors is None else list(options.detectors)
        chosen: list[TraceDetector] = []
        for name in dict.fromkeys(names):
            if name not in self.detectors and name not in TRACE_DETECTORS:
                valid = ", ".join(sorted(set(self.detectors) | set(TRACE_DETECTORS)))
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
            else:
                det = make_detector(name)
                self.detectors[name] = det  # built on first use, then kept (e.g. the classifier)
                chosen.append(det)
        return chosen

    def findings(self, trace: Trace, options: DiagnoseOptions | None = None) -> list[Finding]:
        """Every detector's raw findings, in detector order."""
        return self._run(trace, self._detectors_for(options or DiagnoseOptions()))

    def _run(self, trace: Trace, detectors: Sequence[TraceDetector]) -> list[Finding]:
        if len(trace.steps) > self.max_steps:
            raise TooLargeError(
                f"trace has {len(trace.steps)} steps; the limit is {self.max_steps}", path="trace.steps"
            )
        out: list[Finding] = []
        for det in detectors:
            out.extend(det.inspect(trace))
        return out

    def diagnose(
        self,
        trace: Trace,
        options: DiagnoseOptions | None = None,
        *,
        extra_findings: Iterable[Finding] = (),
    ) -> DiagnosisResponse:
        """Diagnose ``trace`` and recommend the first rung of the primary failure's ladder.

        ``extra_findings`` come from outside the trace detectors (e.g. a stream's ``degradation``).
        """
        options = options or DiagnoseOptions()
        dets = self._detectors_for(options)
        findings = self._run(trace, dets)
        findings.extend(extra_findings)
        failures, signals, primary = fuse(findings)
        recommendation = self.policy.recommend(trace, primary, options=options)
        return DiagnosisResponse(
            trace_id=trace.id,
            model_version=self.model_version,
            detector_versions={d.name: d.version for d in dets},
            healthy=not failures,
            failures=failures,
            signals=signals,
            primary=primary,
            recommendation=recommendation,
            steps=len(trace.steps),
        )


__all__ = ["DEFAULT_THRESHOLDS", "Diagnoser", "fuse", "package_version"]
