"""Each pipeline stage's settings: a validated dataclass read from its ``params.yaml`` section.

>>> cfg = TrainConfig.from_dict({"max_length": 64})
>>> cfg.max_length, cfg.batch_size
(64, 16)
>>> TrainConfig.from_dict({"max_lenght": 64})
Traceback (most recent call last):
...
model.core.errors.InputError: params.yaml:train: unknown keys ['max_lenght']; valid: ...
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import yaml

from model.core.errors import InputError

C = TypeVar("C", bound="_Section")


@dataclass(frozen=True)
class _Section:
    SECTION = ""

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any] | None) -> C:
        data = dict(data or {})
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise InputError(
                f"unknown keys {unknown}; valid: {sorted(names)}", path=f"params.yaml:{cls.SECTION}"
            )
        try:
            obj = cls(**data)
        except TypeError as exc:
            raise InputError(str(exc), path=f"params.yaml:{cls.SECTION}") from exc
        obj.validate()
        return obj

    @classmethod
    def from_params(cls: type[C], path: Path = Path("params.yaml"), section: str | None = None) -> C:
        """Read ``section`` (default: the class's own) of a params file."""
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror}", path=str(path)) from exc
        data = loaded.get(section or cls.SECTION) if isinstance(loaded, dict) else None
        return cls.from_dict(data)

    def validate(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
                raise InputError(f"{f.name} must be >= 0, got {value}", path=f"params.yaml:{self.SECTION}")


@dataclass(frozen=True)
class BaselineConfig(_Section):
    SECTION = "baseline"
    train_examples: int = 20000
    val_examples: int = 3000
    failure_fraction: float = 0.5
    val_failure_fraction: float = 0.15
    post_failure: str = "healthy"
    max_features: int = 200000
    c: float = 4.0
    calib_traces: int = 600
    seed: int = 7


@dataclass(frozen=True)
class TrainConfig(_Section):
    SECTION = "train"
    train_examples: int = 3000
    val_examples: int = 400
    failure_fraction: float = 0.5
    val_failure_fraction: float = 0.15
    post_failure: str = "healthy"
    max_length: int = 128
    batch_size: int = 16
    epochs: float = 1.0
    lr: float = 5e-5
    warmup_fraction: float = 0.06
    weight_decay: float = 0.01
    max_pos_weight: float = 8.0
    calib_traces: int = 150
    eval_every: int = 50
    patience: int = 4
    seed: int = 7
    threads: int = 2
    max_minutes: float = 30.0


@dataclass(frozen=True)
class DistillConfig(_Section):
    SECTION = "distill"
    train_examples: int = 20000
    val_examples: int = 1500
    failure_fraction: float = 0.5
    val_failure_fraction: float = 0.15
    post_failure: str = "healthy"
    vocab_size: int = 8000
    arch: str = "bert"           # bert | ngram (model.training.classifier.ngram)
    dim: int = 64                # ngram: embedding width
    buckets: int = 65536         # ngram: hashed bigram buckets
    dropout: float = 0.1         # ngram: before the output layer
    token_dropout: float = 0.0   # ngram: share of input tokens dropped while training
    ensemble: int = 1            # ngram: nets trained apart whose logits are averaged (no teacher)
    layers: int = 4
    hidden: int = 256
    heads: int = 4
    intermediate: int = 1024
    max_length: int = 256
    batch_size: int = 32
    epochs: float = 3.0
    lr: float = 5e-4
    warmup_fraction: float = 0.06
    weight_decay: float = 0.01
    max_pos_weight: float = 8.0
    soft_weight: float = 0.5
    soft_examples: int = 6000
    teacher_batch: int = 32
    init_from: str | None = None
    calib_traces: int = 400
    eval_every: int = 200
    patience: int = 4
    seed: int = 7
    threads: int = 2
    max_minutes: float = 25.0


@dataclass(frozen=True)
class ExportConfig(_Section):
    SECTION = "export"
    latency_target_ms: float = 25.0
    threads: int = 2
    ship: str = "auto"
    candidates: list[str] = field(default_factory=lambda: ["minilm", "student"])


@dataclass(frozen=True)
class EvaluateConfig(_Section):
    SECTION = "evaluate"
    test_traces: int = 400
    heldout_traces: int = 400
    agreement_steps: int = 1500
    #: per-candidate cap on traces per split (a subset of the same sample) for slow candidates
    candidate_traces: dict[str, int] = field(default_factory=dict)
    seed: int = 7
    threads: int = 2


__all__ = ["BaselineConfig", "DistillConfig", "EvaluateConfig", "ExportConfig", "TrainConfig"]
