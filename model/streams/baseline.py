"""The in-control baseline of the CUSUM (:mod:`model.streams.cusum`): a robust estimate of it, and
the normal score of an observation against a baseline learnt from the stream so far (self-starting).

The score maps Student's t to a normal score with the same tail probability (Hawkins, 1987), so that
for Gaussian in-control data the scores are exactly independent N(0, 1) whatever the warm-up's length.

>>> round(t_to_normal(2.0, 1e9), 3), round(t_to_normal(2.0, 5.0), 3)
(2.0, 1.636)
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from model.core.errors import InputError

MAD_TO_SIGMA = 1.4826
"""Scale factor from the median absolute deviation to sigma for Gaussian data."""

_Z_MAX = 37.0
"""|z| when Student's t tail underflows (``Phi^-1`` of the smallest double is about -37.5)."""


def robust_location_scale(values: Any) -> tuple[float, float]:
    """Median and ``1.4826 * MAD`` of ``values`` (falls back to the standard deviation if MAD is 0).

    >>> robust_location_scale([1.0, 2.0, 3.0, 4.0, 100.0])
    (3.0, 1.4826)
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise InputError("cannot estimate a baseline from no values")
    if not np.all(np.isfinite(arr)):
        raise InputError("baseline values must be finite numbers")
    med = float(np.median(arr))
    scale = MAD_TO_SIGMA * float(np.median(np.abs(arr - med)))
    if scale == 0.0:  # e.g. a 0/1 indicator that was constant: MAD says nothing
        scale = float(np.std(arr))
    return med, scale


@functools.cache
def _special() -> Any:
    from scipy import special  # imported when first needed

    return special


def t_to_normal(t: float, df: float) -> float:
    """The normal score with the same tail probability as ``t`` under Student's t(``df``)."""
    if df > 1e7:
        return t
    special = _special()
    p = float(special.stdtr(df, -abs(t)))  # the small tail, computed without cancellation
    z = _Z_MAX if p <= 0.0 else -float(special.ndtri(p))
    return math.copysign(min(z, _Z_MAX), t)


__all__ = ["MAD_TO_SIGMA", "robust_location_scale", "t_to_normal"]
