"""One execution graph per trace while several detectors read it (:func:`shared_graphs`).

The rule detectors each build the graph of the trace they read
(:meth:`model.core.graph.ExecutionGraph.from_trace`); inside ``with shared_graphs():`` a trace's
graph is built once and handed to every detector that asks (they only read it). The trace must not
change inside the block. A session append runs its window's detectors so
(:mod:`model.diagnosis.incremental`).

>>> from model.core.graph import ExecutionGraph
>>> from model.data.builder import make_trace
>>> t = make_trace("loop", seed=0)
>>> with shared_graphs():
...     ExecutionGraph.from_trace(t, data_flow=False) is ExecutionGraph.from_trace(t, data_flow=False)
True
>>> ExecutionGraph.from_trace(t, data_flow=False) is ExecutionGraph.from_trace(t, data_flow=False)
False
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

#: (id of the trace, data_flow) → (the trace, its graph), inside :func:`shared_graphs`
GRAPHS: ContextVar[dict[tuple[int, bool], tuple[Any, Any]] | None] = ContextVar("shared_graphs", default=None)


@contextmanager
def shared_graphs() -> Iterator[None]:
    token = GRAPHS.set({})
    try:
        yield
    finally:
        GRAPHS.reset(token)


__all__ = ["GRAPHS", "shared_graphs"]
