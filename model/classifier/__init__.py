"""The failure classifier: per-step multi-label scoring of agent traces.

Serving needs only :mod:`model.classifier.runtime` (onnxruntime + tokenizers + NumPy) and the
representation; training (:mod:`.train`, :mod:`.distill`, :mod:`.baseline`), export and evaluation
import torch / transformers / scikit-learn lazily and belong to the ``train`` extra.

Modules: ``representation`` (the versioned step → text function), ``data`` (labels, examples),
``metrics`` (calibration, thresholds, F1, ECE), ``runtime`` (ONNX inference), ``detector`` (the
registered ``classifier`` trace detector), ``vocab`` (the student's WordPiece vocabulary).
"""

from __future__ import annotations

from .data import LABELS
from .representation import REPRESENTATION_VERSION, RepresentationConfig, step_text

__all__ = ["LABELS", "REPRESENTATION_VERSION", "RepresentationConfig", "step_text"]
