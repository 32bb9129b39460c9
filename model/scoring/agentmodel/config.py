"""The agent model's hyper-parameters (``params.yaml``'s ``learning_curve.model`` and each candidate)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from model.core.errors import InputError

#: Options added after agent models were first stored, with their defaults (see ``to_dict``).
LATER_DEFAULTS: dict[str, Any] = {"encoder_weight": 0.0, "split": "shape", "encoder_scale": "block"}


@dataclass(frozen=True)
class AgentModelConfig:
    """Hyper-parameters of :class:`AgentModel` (validated; ``params.yaml``'s ``learning_curve.model``).

    c: inverse L2 strength (sklearn's ``C``; sample weights average one).
    shape_weight, ngram_weight, encoder_weight: scale of each block (0 leaves a block out; the encoder
        block — :mod:`model.scoring.agentmodel.encoded`, the shipped static encoder — is off by default).
    prior_weight: the prior's coefficient is shrunk towards this (1: trust the zero-shot score).
    prior_l2: strength of that shrinkage (in balanced-weight units: about that many runs).
    prefix_fractions: the prefixes each labelled run is trained on.
    buckets: n-gram hash columns; min_df: runs a bucket must appear in to be learned.
    last_turn: also count the words of the latest assistant message as ``last:`` n-grams (replaced as
        the run goes on), so what the agent said last weighs apart from the same words earlier.
    internal_folds: grouped folds of the model's own CV (threshold, card); 0 skips it.
    target_false_alarm: the share of new successful runs whose score may reach the early-warning point at
        any of the prefixes :data:`WARNING_PREFIXES`, held with :data:`WARNING_CONFIDENCE` (``at_risk`` is
        raised at the first step that reaches it, so the point is set on each run's highest out-of-fold
        prefix score, not on one prefix: :func:`warning_point`).
    combine: ``joint`` (one regression over both blocks) or ``stack`` (a shape model and an n-gram model
        fitted apart, combined by a logistic regression on their out-of-fold logits over ``stack_folds``
        grouped folds of the training runs — nested: the weights never see the runs they are judged on;
        the result collapses into the same linear form, so serving is unchanged).
    encoder_scale: how the encoder block is scaled once centred: ``block`` (one scale, so a row's norm is
        about one: the PCA's weak components stay weak) or ``dim`` (each column to unit variance, then
        ÷ √columns: every direction penalised alike).
    split: what ``stack`` / ``mean`` fit apart: ``shape`` (the shape block against the text blocks) or
        ``encoder`` (the shape and n-gram blocks against the encoder block: the encoder's logit averaged
        with the bag of words', as a late fusion).
    """

    c: float = 4.0
    shape_weight: float = 1.0
    ngram_weight: float = 1.0
    encoder_weight: float = 0.0
    prior_weight: float = 1.0
    prior_l2: float = 10.0
    prefix_fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    buckets: int = 1 << 18
    min_df: int = 2
    last_turn: bool = False
    internal_folds: int = 5
    combine: str = "joint"
    split: str = "shape"
    encoder_scale: str = "block"
    stack_folds: int = 3
    target_false_alarm: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        if self.c <= 0:
            raise InputError(f"c must be > 0; got {self.c}", path="c")
        w = (self.shape_weight, self.ngram_weight, self.encoder_weight)
        if min(w) < 0 or max(w) == 0:
            raise InputError(f"shape_weight, ngram_weight and encoder_weight must be ≥ 0, not all 0; got {w}",
                             path="shape_weight")
        if not self.prefix_fractions or any(not 0 < f <= 1 for f in self.prefix_fractions):
            raise InputError(f"prefix_fractions must lie in (0, 1]; got {self.prefix_fractions}",
                             path="prefix_fractions")
        if self.combine not in ("joint", "stack", "mean"):
            raise InputError(f"combine must be 'joint', 'stack' or 'mean'; got {self.combine!r}", path="combine")
        if self.encoder_scale not in ("block", "dim"):
            raise InputError(f"encoder_scale must be 'block' or 'dim'; got {self.encoder_scale!r}", path="encoder_scale")
        if self.split not in ("shape", "encoder"):
            raise InputError(f"split must be 'shape' or 'encoder'; got {self.split!r}", path="split")
        if self.buckets < 16:
            raise InputError(f"buckets must be ≥ 16; got {self.buckets}", path="buckets")
        object.__setattr__(self, "prefix_fractions", tuple(float(f) for f in self.prefix_fractions))

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> AgentModelConfig:
        d = dict(d or {})
        d.pop("warning_fraction", None)  # retired: stored models written before the point read every prefix
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise InputError(f"unknown agent-model option(s) {unknown}; valid: {sorted(names)}", path="config")
        if "prefix_fractions" in d:
            d["prefix_fractions"] = tuple(d["prefix_fractions"])
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON values (what :meth:`from_dict` reads back). Options added after a model
        format was first stored are left out at their defaults, so a stored model's version (a hash of
        this) does not change when the code learns a new option."""
        d = asdict(self)
        d["prefix_fractions"] = list(self.prefix_fractions)
        for name, default in LATER_DEFAULTS.items():
            if d[name] == default:
                del d[name]
        return d


__all__ = ["AgentModelConfig"]
