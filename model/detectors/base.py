"""The two detector protocols and their explicit registries (name → class).

A trace detector is stateless: ``inspect(trace) -> list[Finding]``. A stream detector keeps running
state: ``update(x) -> Alarm | None``, ``reset()``, and ``get_state()`` / ``set_state()`` so that the
state can be stored per (tenant, stream) and continued by any worker.

Constructors only store keyword-only hyper-parameters (``get_params()`` returns them); running
state is set in ``reset()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from model.core.errors import UnknownDetectorError
from model.core.findings import Finding
from model.core.kinds import FailureKind
from model.core.schema import Trace


@runtime_checkable
class TraceDetector(Protocol):
    """Stateless: findings from a whole trace."""

    name: ClassVar[str]
    version: ClassVar[str]
    kinds: ClassVar[tuple[FailureKind, ...]]

    def inspect(self, trace: Trace) -> list[Finding]: ...

    def get_params(self) -> dict[str, Any]: ...


@runtime_checkable
class StreamDetector(Protocol):
    """Stateful over a stream of numbers; state is JSON-serialisable."""

    name: ClassVar[str]
    version: ClassVar[str]

    def update(self, x: float) -> Any: ...

    def reset(self) -> None: ...

    def get_state(self) -> dict[str, Any]: ...

    def set_state(self, state: dict[str, Any]) -> None: ...

    def get_params(self) -> dict[str, Any]: ...


TRACE_DETECTORS: dict[str, type[Any]] = {}
STREAM_DETECTORS: dict[str, type[Any]] = {}

T = TypeVar("T")


def register_trace_detector(cls: type[T]) -> type[T]:
    """Class decorator: register a trace detector under its ``name``."""
    name = cls.name  # type: ignore[attr-defined]
    if name in TRACE_DETECTORS and TRACE_DETECTORS[name] is not cls:
        raise ValueError(f"trace detector {name!r} is already registered")
    TRACE_DETECTORS[name] = cls
    return cls


def register_stream_detector(cls: type[T]) -> type[T]:
    """Class decorator: register a stream detector under its ``name``."""
    name = cls.name  # type: ignore[attr-defined]
    if name in STREAM_DETECTORS and STREAM_DETECTORS[name] is not cls:
        raise ValueError(f"stream detector {name!r} is already registered")
    STREAM_DETECTORS[name] = cls
    return cls


def trace_detector_names() -> list[str]:
    return sorted(TRACE_DETECTORS)


def stream_detector_names() -> list[str]:
    return sorted(STREAM_DETECTORS)


def _make(registry: dict[str, type[Any]], what: str, name: str, params: dict[str, Any]) -> Any:
    try:
        cls = registry[name]
    except KeyError:
        valid = ", ".join(sorted(registry)) or "(none registered)"
        raise UnknownDetectorError(
            f"unknown {what} detector {name!r}; valid names: {valid}", path="detectors"
        ) from None
    return cls(**params)


def make_detector(name: str, **params: Any) -> TraceDetector:
    """Build the trace detector registered as ``name``; the error lists the valid names."""
    det: TraceDetector = _make(TRACE_DETECTORS, "trace", name, params)
    return det


def make_stream_detector(name: str, **params: Any) -> StreamDetector:
    """Build the stream detector registered as ``name``; the error lists the valid names."""
    det: StreamDetector = _make(STREAM_DETECTORS, "stream", name, params)
    return det


DetectorFactory = Callable[..., TraceDetector]
