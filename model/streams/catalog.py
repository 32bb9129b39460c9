"""The stream detectors by name (``update(x) -> Alarm | None``), in one explicit dict.

The plug-ins know nothing of this module; whoever builds a stream detector by name (the service,
from a stored stream's ``detector`` and ``params``) imports this one. The trace detectors have their
own catalog, :mod:`model.detectors.catalog`.

>>> stream_detector_names()
['cusum']
>>> make_stream_detector("cusum", shift=0.5).get_params()["shift"]
0.5
>>> make_stream_detector("ewma")
Traceback (most recent call last):
...
model.core.errors.UnknownDetectorError: detectors: unknown stream detector 'ewma'; valid names: cusum
"""

from __future__ import annotations

from typing import Any

from model.detectors.base import StreamDetector, make_from
from model.streams.cusum import Cusum

STREAM_DETECTORS: dict[str, type[StreamDetector]] = {cls.name: cls for cls in (Cusum,)}
"""Name → class of every stream detector."""


def stream_detector_names() -> list[str]:
    """The stream detectors' names, sorted."""
    return sorted(STREAM_DETECTORS)


def make_stream_detector(name: str, **params: Any) -> StreamDetector:
    """Build the stream detector called ``name`` with ``params``; the error lists the valid names.

    Raises
    ------
    UnknownDetectorError
        ``name`` is not a stream detector.
    """
    return make_from(STREAM_DETECTORS, "stream", name, params)


__all__ = ["STREAM_DETECTORS", "make_stream_detector", "stream_detector_names"]
