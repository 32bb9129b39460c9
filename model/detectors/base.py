"""The two detector protocols; the catalogs that name the plug-ins build them through :func:`make_from`.

A trace detector is stateless: ``inspect(trace) -> list[Finding]``. A stream detector keeps running
state: ``update(x) -> Alarm | None``, ``reset()``, and ``get_state()`` / ``set_state()`` so that the
state can be stored per (tenant, stream) and continued by any worker.

Constructors only store keyword-only hyper-parameters (``get_params()`` returns them); running
state is set in ``reset()``.
"""

from __future__ import annotations

from collections.abc import Mapping
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


D = TypeVar("D")


def make_from(catalog: Mapping[str, type[D]], shape: str, name: str, params: dict[str, Any]) -> D:
    """Build ``catalog[name](**params)``; an unknown name is an error that lists the valid ones.

    The catalogs (:mod:`model.detectors.catalog`, :mod:`model.streams.catalog`) call this; a plug-in
    never does.

    Raises
    ------
    UnknownDetectorError
        ``name`` is not in ``catalog``.
    """
    try:
        cls = catalog[name]
    except KeyError:
        valid = ", ".join(sorted(catalog)) or "(none)"
        raise UnknownDetectorError(
            f"unknown {shape} detector {name!r}; valid names: {valid}", path="detectors"
        ) from None
    return cls(**params)


__all__ = ["StreamDetector", "TraceDetector", "make_from"]
