"""The trace detectors by name: every rule and the classifier, in one explicit dict.

The plug-ins know nothing of this module (they import only :mod:`model.detectors.base`); whoever
builds detectors by name (the diagnoser, the labelling functions, the stream metrics, the service)
imports this one. The stream detectors have their own catalog, :mod:`model.streams.catalog`.

>>> "loop" in trace_detector_names()
True
>>> make_detector("loop", repeats=4).get_params()
{'repeats': 4, 'cycle': 3}
>>> make_detector("lopo")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
model.core.errors.UnknownDetectorError: detectors: unknown trace detector 'lopo'; valid names: assumption_violated, ...
"""

from __future__ import annotations

from typing import Any

from model.detectors.base import TraceDetector, make_from
from model.detectors.classifier import ClassifierDetector
from model.detectors.rules.answer import EmptyResponseRule, IncompleteRule
from model.detectors.rules.assumption import AssumptionViolatedRule
from model.detectors.rules.calls import DisallowedToolRule, MalformedCallRule
from model.detectors.rules.failed import (
    IgnoredErrorRule,
    ProviderErrorRule,
    RateLimitedRule,
    TimeoutRule,
    ToolErrorRule,
)
from model.detectors.rules.loop import LoopRule
from model.detectors.rules.refusal import RefusalRule

TRACE_DETECTORS: dict[str, type[TraceDetector]] = {
    cls.name: cls
    for cls in (
        AssumptionViolatedRule,
        ClassifierDetector,
        DisallowedToolRule,
        EmptyResponseRule,
        IgnoredErrorRule,
        IncompleteRule,
        LoopRule,
        MalformedCallRule,
        ProviderErrorRule,
        RateLimitedRule,
        RefusalRule,
        TimeoutRule,
        ToolErrorRule,
    )
}
"""Name → class of every trace detector."""


#: The detectors left out of the default set (too slow for every request, or needing an artefact): they
#: run only when a request names them (``options.detectors``) or a caller builds them explicitly.
OPT_IN_DETECTORS: frozenset[str] = frozenset({"classifier"})


def default_detector_names() -> list[str]:
    """The trace detectors a diagnosis runs unless told otherwise: every one but :data:`OPT_IN_DETECTORS`,
    sorted by name.

    >>> "loop" in default_detector_names(), "classifier" in default_detector_names()
    (True, False)
    """
    return [n for n in sorted(TRACE_DETECTORS) if n not in OPT_IN_DETECTORS]


def default_detectors() -> list[TraceDetector]:
    """A fresh detector with default parameters for each of :func:`default_detector_names`, in that order."""
    return [make_detector(n) for n in default_detector_names()]


def trace_detector_names() -> list[str]:
    """The trace detectors' names, sorted."""
    return sorted(TRACE_DETECTORS)


def make_detector(name: str, **params: Any) -> TraceDetector:
    """Build the trace detector called ``name`` with ``params``; the error lists the valid names.

    Raises
    ------
    UnknownDetectorError
        ``name`` is not a trace detector.
    """
    return make_from(TRACE_DETECTORS, "trace", name, params)


__all__ = ["OPT_IN_DETECTORS", "TRACE_DETECTORS", "default_detector_names", "default_detectors", "make_detector",
           "trace_detector_names"]
