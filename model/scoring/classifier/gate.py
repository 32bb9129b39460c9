"""Reading the classifier's gate: which kinds it reports at all, and which of them it may raise as
failures (``gate.json`` beside the model; every other reported kind is capped below the failure
threshold, a signal).

How the gate is decided and written (the DVC stage ``gate``) is :mod:`model.training.classifier.gate`;
serving only reads the file.

>>> read_gate("/nonexistent") is None
True
>>> failure_kinds(None) == frozenset(k.value for k in REPORTED_KINDS)
True
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model.core.kinds import KIND_INFO, FailureKind, Producer

GATE_FILE = "gate.json"

#: Kinds the classifier may report at all: those it is a producer of (docs/architecture.md, "Failure kinds").
REPORTED_KINDS: tuple[FailureKind, ...] = tuple(
    k for k, info in KIND_INFO.items() if Producer.CLASSIFIER in info.producers
)


def read_gate(folder: str | Path) -> dict[str, Any] | None:
    """The gate in ``folder`` (its ``gate.json``), or ``None`` when there is none."""
    path = Path(folder) / GATE_FILE
    if not path.is_file():
        return None
    gate: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return gate


def failure_kinds(gate: dict[str, Any] | None) -> frozenset[str]:
    """The kinds ``gate`` trusts as failures; without a gate, every reported kind."""
    if gate is None:
        return frozenset(k.value for k in REPORTED_KINDS)
    return frozenset(gate.get("failure_kinds", []))


__all__ = ["GATE_FILE", "REPORTED_KINDS", "failure_kinds", "read_gate"]
