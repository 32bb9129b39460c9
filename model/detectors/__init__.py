"""Detectors: trace detectors (``inspect(trace) -> list[Finding]``) and stream detectors
(``update(x) -> Alarm | None``), each registered by name.

>>> from model.detectors import make_detector, trace_detector_names
>>> "loop" in trace_detector_names()
True
"""

from __future__ import annotations

from model.detectors.base import (
    STREAM_DETECTORS,
    TRACE_DETECTORS,
    StreamDetector,
    TraceDetector,
    make_detector,
    make_stream_detector,
    register_stream_detector,
    register_trace_detector,
    stream_detector_names,
    trace_detector_names,
)

# Importing the modules registers their detectors.
from model.detectors import rules as rules  # noqa: E402,F401  isort: skip
from model.streams import cusum as _cusum  # noqa: E402,F401  isort: skip
from model.detectors import classifier as _classifier  # noqa: E402,F401  isort: skip

__all__ = [
    "STREAM_DETECTORS",
    "TRACE_DETECTORS",
    "StreamDetector",
    "TraceDetector",
    "make_detector",
    "make_stream_detector",
    "register_stream_detector",
    "register_trace_detector",
    "stream_detector_names",
    "trace_detector_names",
]
