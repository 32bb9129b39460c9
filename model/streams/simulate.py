"""Seeded synthetic agent metric streams with an injected degradation (for the notebook,
benchmarks and tests).

>>> import numpy as np
>>> s = simulate_agent_metrics(400, change_at=250, rng=np.random.default_rng(0))
>>> sorted(s), s["llm_latency_ms"].shape
(['llm_latency_ms', 'quality'], (400,))
>>> bool(np.median(s["llm_latency_ms"][250:]) > np.median(s["llm_latency_ms"][:250]))
True
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from model.core.errors import InputError


def simulate_agent_metrics(
    n: int,
    *,
    change_at: int,
    rng: np.random.Generator,
    latency_median_ms: float = 800.0,
    latency_spread: float = 0.25,
    latency_factor: float = 1.3,
    quality_mean: float = 0.85,
    quality_drop: float = 0.03,
    quality_ramp: int = 40,
    quality_concentration: float = 200.0,
) -> dict[str, NDArray[np.float64]]:
    """Per-trace LLM latency and a quality score, both degrading from ``change_at`` on.

    Latency is log-normal (median ``latency_median_ms``, log-sd ``latency_spread``) and is
    multiplied by ``latency_factor`` after the change (a step: a slower model or provider).
    Quality is a Beta score in [0, 1] with mean ``quality_mean`` that sags by ``quality_drop``
    over ``quality_ramp`` traces (a slow degradation), then stays down.
    """
    if not 0 < change_at < n:
        raise InputError(f"change_at must be inside (0, {n}); got {change_at}")
    log_latency = rng.normal(np.log(latency_median_ms), latency_spread, n)
    log_latency[change_at:] += np.log(latency_factor)
    ramp = np.clip((np.arange(n) - change_at + 1) / max(quality_ramp, 1), 0.0, 1.0)
    mean = quality_mean - quality_drop * ramp
    quality = rng.beta(mean * quality_concentration, (1.0 - mean) * quality_concentration)
    return {"llm_latency_ms": np.exp(log_latency), "quality": quality}


__all__ = ["simulate_agent_metrics"]
