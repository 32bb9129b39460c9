"""A tenant head: what one agent's own labelled history teaches the run scorer.

The shipped run scorer reads domain-general evidence and knows nothing of a tenant's tools, policy
or wording. A retrain (``triage retrain``) adds a **head**: L2 logistic regression over

* the shipped model's own logit (so the head starts from what it says), and
* a hashed bag of the run's words, role-prefixed (``a:`` agent text, ``u:`` user, ``r:`` tool
  results, ``e:`` error results), of its tool calls (``call:NAME``, ``err:NAME`` for a call whose
  result is an error) and of call bigrams (``seq:A>B``): :data:`DIM` buckets (crc32), log counts,
  L2-normalised.

It is trained on the base data and the tenant's runs, the tenant's weighted up, and lives inside
the run scorer's artefact (``head`` in ``runscore.json``): serving it is numpy and ``zlib`` only.

>>> from model.schema import Step, Trace
>>> t = Trace(steps=[Step(kind="user_input", content="Cancel my flight", source_index=0),
...                  Step(kind="tool_call", tool_name="cancel_reservation", source_index=1)])
>>> v = text_vector(t)
>>> v.shape, round(float(v @ v), 4)
((4096,), 1.0)
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize

from model.schema import StepKind, Trace

from .features import SCAN_CHARS, _is_error

#: Buckets of the hashed text features.
DIM = 4096
#: Version of the token scheme (the feature cache keys on it).
TOKENS_VERSION = 1
_TOKEN = re.compile(r"[^\W\d_]{3,}", re.UNICODE)
_ROLE = {StepKind.USER_INPUT: "u", StepKind.TOOL_RESULT: "r", StepKind.ERROR: "e", StepKind.SYSTEM: "s",
         StepKind.LLM_OUTPUT: "a", StepKind.FINAL_OUTPUT: "f", StepKind.LLM_REASONING: "a",
         StepKind.TOOL_CALL: "c"}


def _text(s: str) -> str:
    if len(s) <= SCAN_CHARS:
        return s
    return s[: SCAN_CHARS // 2] + " " + s[-SCAN_CHARS // 2:]


def tokens(trace: Trace) -> Iterable[str]:
    """The run's tokens (see the module docstring)."""
    prev_call: str | None = None
    last_call: str | None = None
    for s in trace.steps:
        if s.kind is StepKind.SYSTEM:
            continue  # the same for every run of an agent: no signal, only cost
        role = _ROLE.get(s.kind, "o")
        if s.kind is StepKind.TOOL_CALL:
            name = s.tool_name or "?"
            yield f"call:{name}"
            if prev_call is not None:
                yield f"seq:{prev_call}>{name}"
            prev_call = last_call = name
            continue
        if s.kind is StepKind.TOOL_RESULT and _is_error(s):
            role = "e"
            yield f"err:{last_call or s.tool_name or '?'}"
        for w in _TOKEN.findall(_text(s.content or "")):
            yield f"{role}:{w.lower()}"


def text_vector(trace: Trace) -> np.ndarray:
    """The run's hashed token counts: log1p per bucket, L2-normalised (:data:`DIM` floats)."""
    counts: dict[int, int] = {}
    for tok in tokens(trace):
        b = zlib.crc32(tok.encode("utf-8")) % DIM
        counts[b] = counts.get(b, 0) + 1
    v = np.zeros(DIM, dtype=np.float32)
    if counts:
        idx = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
        v[idx] = np.log1p(np.fromiter(counts.values(), dtype=np.float32, count=len(counts)))
        v /= float(np.linalg.norm(v))
    return v


@dataclass
class TenantHead:
    """``sigmoid(w0 + a · base_logit + w · text_vector)``: the tenant's failure probability."""

    bias: float
    base_weight: float
    weights: np.ndarray          # DIM floats
    threshold: float             # the operating point on the training runs' probabilities
    meta: dict[str, Any]

    @classmethod
    def fit(cls, H: np.ndarray, base_logit: np.ndarray, y: np.ndarray, sample_weight: np.ndarray, *,
            l2: float = 1.0, target_false_alarm: float = 0.1, tenant_mask: np.ndarray | None = None,
            meta: dict[str, Any] | None = None) -> TenantHead:
        """Fit on rows ``H`` (text vectors), ``base_logit`` (the base scorer's), labels ``y``."""
        X = np.hstack([np.ones((len(H), 1)), base_logit[:, None], H.astype(np.float64)])
        sw = sample_weight * (len(y) / sample_weight.sum())

        def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
            z = X @ w
            p = 1 / (1 + np.exp(-z))
            eps = 1e-12
            val = -(sw * (y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))).sum()
            g = X.T @ (sw * (p - y))
            val += 0.5 * l2 * float(w[2:] @ w[2:])
            g[2:] += l2 * w[2:]
            return float(val), g

        w0 = np.zeros(X.shape[1])
        w0[1] = 1.0  # start from the base model
        w: np.ndarray = minimize(loss, w0, jac=True, method="L-BFGS-B", options={"maxiter": 300}).x
        head = cls(float(w[0]), float(w[1]), w[2:].astype(np.float64), 0.5, dict(meta or {}))
        p = head.probability(H, base_logit)
        ok = (y == 0) if tenant_mask is None else ((y == 0) & tenant_mask)
        if ok.any():
            head.threshold = float(min(1.0, np.quantile(p[ok], 1 - target_false_alarm, method="higher") + 1e-6))
        return head

    def logit(self, H: np.ndarray, base_logit: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.bias + self.base_weight * base_logit + H.astype(np.float64) @ self.weights
        return out

    def probability(self, H: np.ndarray, base_logit: np.ndarray) -> np.ndarray:
        out: np.ndarray = 1 / (1 + np.exp(-self.logit(H, base_logit)))
        return out

    def to_dict(self) -> dict[str, Any]:
        nz = np.flatnonzero(np.abs(self.weights) > 1e-7)
        return {"dim": DIM, "tokens_version": TOKENS_VERSION, "bias": self.bias, "base_weight": self.base_weight,
                "buckets": [int(i) for i in nz], "weights": [round(float(self.weights[i]), 6) for i in nz],
                "threshold": self.threshold, "meta": self.meta}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TenantHead:
        if int(d["dim"]) != DIM or int(d["tokens_version"]) != TOKENS_VERSION:
            raise ValueError(f"tenant head of dim {d['dim']} / tokens v{d['tokens_version']}; this code has "
                             f"{DIM} / v{TOKENS_VERSION}: retrain")
        w = np.zeros(DIM, dtype=np.float64)
        b = np.asarray(d["buckets"], dtype=np.int64)
        if len(b) and (b.min() < 0 or b.max() >= DIM):
            raise ValueError("tenant head bucket out of range")
        w[b] = np.asarray(d["weights"], dtype=np.float64)
        return cls(float(d["bias"]), float(d["base_weight"]), w, float(d["threshold"]), dict(d.get("meta", {})))


__all__ = ["DIM", "TOKENS_VERSION", "TenantHead", "text_vector", "tokens"]
