"""The step classifier's scores of a trace, computed ahead in a helper thread (:class:`ScoredAhead`).

onnxruntime releases the GIL while it runs the model, so the classifier's forward pass (about a
millisecond for a ten-step trace) can overlap the Python work a request does before its decision
(the agent's resolution, the stored state's reads): the answer comes sooner, for the same CPU plus
a thread's hand-over (tens of µs). :meth:`model.diagnosis.diagnoser.Diagnoser.score_ahead` starts
it; inside :meth:`ScoredAhead.used` the next decision on that same trace object takes the helper's
answer instead of scoring the trace itself (once: a second decision scores again), so what is
decided does not change.

The helper runs under the caller's ``guard`` (the service's model lock: one inference at a time per
worker); the caller waits for it (:meth:`ScoredAhead.wait`) holding no such lock, then decides. A
helper that has not started when it is waited for is cancelled: the decision scores the trace
itself, never later than without the helper.

>>> from concurrent.futures import Future
>>> f: Future[tuple[list[object], dict[str, float]]] = Future()
>>> f.set_result(([], {"loop": 0.1}))
>>> ahead = ScoredAhead(object(), object(), f)
>>> ahead.wait()
>>> with ahead.used():
...     len(AHEAD.get() or {})
1
>>> with ahead.used():  # once only
...     AHEAD.get() is None
True
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

#: Inside :meth:`ScoredAhead.used`: (id of the trace, id of the detector) → (the trace, the detector,
#: the helper's future of ``detector.inspect_scored(trace)``); taken out when a decision uses it.
AHEAD: ContextVar[dict[tuple[int, int], tuple[Any, Any, futures.Future[Any]]] | None] = ContextVar(
    "scored_ahead", default=None)


class ScoredAhead:
    """``detector.inspect_scored(trace)`` running in a helper thread (``future``)."""

    def __init__(self, trace: Any, detector: Any, future: futures.Future[Any]) -> None:
        self.trace = trace
        self.detector = detector
        self.future = future
        self._spent = False

    def wait(self) -> None:
        """Wait for the helper (holding no lock its guard takes); one not started yet is cancelled,
        and the decision then scores the trace itself."""
        if not self.future.cancel():
            futures.wait([self.future])

    @contextmanager
    def used(self) -> Iterator[None]:
        """Inside, the first decision on the trace takes the helper's answer (its error, if it
        raised); later ones, and every one after a cancelled helper, score the trace themselves."""
        if self._spent or self.future.cancelled():
            yield
            return
        self._spent = True
        token = AHEAD.set({(id(self.trace), id(self.detector)): (self.trace, self.detector, self.future)})
        try:
            yield
        finally:
            AHEAD.reset(token)


def take_ahead(trace: Any, detector: Any) -> futures.Future[Any] | None:
    """The helper's future for ``detector`` on this very ``trace`` inside :meth:`ScoredAhead.used`
    (taken out: used once), else ``None``."""
    ahead = AHEAD.get()
    if not ahead:
        return None
    hit = ahead.pop((id(trace), id(detector)), None)
    if hit is None or hit[0] is not trace or hit[1] is not detector:
        return None
    return hit[2]


__all__ = ["AHEAD", "ScoredAhead", "take_ahead"]
