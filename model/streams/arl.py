"""Average run lengths (ARL) of a tabular CUSUM: Siegmund's approximation and simulation.

The CUSUM runs on standardised values ``z = (x - mu0) / sigma``; with reference value ``k`` and
decision interval ``h`` its upper statistic is ``S+ = max(0, S+ + z - k)`` and it alarms when
``S+ > h`` (the lower side mirrors it). For ``z ~ N(mu, 1)``, Siegmund's (1985) approximation of
the one-sided ARL is::

    ARL(mu) ~ (exp(-2 D b) + 2 D b - 1) / (2 D^2),   D = mu - k,  b = h + 1.166

(``b^2`` when ``D = 0``). A two-sided scheme alarms when either side does, so
``1/ARL = 1/ARL+ + 1/ARL-``. In control (``mu = 0``) this is the false-alarm run length ARL0;
under a shift of ``delta`` sigma it is the detection delay ARL1 (zero-state: the shift is present
from the first observation).

>>> round(siegmund_arl(0.5, 4.0), 1)  # two-sided, in control
169.0
>>> h = h_for_arl0(500.0, 0.5)
>>> round(h, 3), round(siegmund_arl(0.5, h), 1)
(5.063, 500.0)
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from model.core.errors import InputError

Direction = Literal["both", "up", "down"]

SIEGMUND_CORRECTION = 1.166
"""Siegmund's boundary correction, ``2 * 0.583``: the overshoot of a Gaussian random walk."""


def _one_sided(drift: float, b: float) -> float:
    """Siegmund's one-sided ARL for a walk with per-step drift ``drift`` and barrier ``b``."""
    if abs(drift) < 1e-9:
        return b * b
    x = 2.0 * drift * b
    if x < -700.0:  # exp overflows; the exponential term dominates by far
        return math.inf
    return (math.exp(-x) + x - 1.0) / (2.0 * drift * drift)


def _check_direction(direction: str) -> None:
    if direction not in ("both", "up", "down"):
        raise InputError(f"direction must be 'both', 'up' or 'down'; got {direction!r}")


def siegmund_arl(k: float, h: float, shift: float = 0.0, *, direction: Direction = "both") -> float:
    """Siegmund's approximation of a tabular CUSUM's average run length.

    Parameters
    ----------
    k
        Reference value (in sigma units), usually half the smallest shift worth catching.
    h
        Decision interval (in sigma units).
    shift
        True mean of the standardised values: 0 gives ARL0, ``delta`` gives ARL1.
    direction
        ``"both"`` (two-sided: ``1/ARL = 1/ARL+ + 1/ARL-``), ``"up"`` or ``"down"``.

    Returns
    -------
    float
        The expected number of observations up to and including the alarm.

    >>> round(siegmund_arl(0.5, 5.0, shift=1.0), 2)
    10.34
    """
    _check_direction(direction)
    b = h + SIEGMUND_CORRECTION
    up = _one_sided(shift - k, b)
    down = _one_sided(-shift - k, b)
    if direction == "up":
        return up
    if direction == "down":
        return down
    return 1.0 / (1.0 / up + 1.0 / down)


@functools.lru_cache(maxsize=1024)
def h_for_arl0(arl0: float, k: float, *, direction: Direction = "both") -> float:
    """The decision interval ``h`` whose in-control ARL (Siegmund) equals ``arl0``.

    Solved numerically (Brent's method); ARL0 grows monotonically with ``h``. Remembered per
    arguments: a stream's detector is rebuilt from its stored state at every observation.

    Raises
    ------
    InputError
        ``arl0`` is not above 1, or ``k`` is negative.

    >>> round(h_for_arl0(370.0, 0.5), 3)
    4.766
    """
    _check_direction(direction)
    if not math.isfinite(arl0) or arl0 <= 1.0:
        raise InputError(f"arl0 must be a finite number above 1; got {arl0!r}")
    if not math.isfinite(k) or k < 0.0:
        raise InputError(f"k must be a finite number >= 0; got {k!r}")
    if siegmund_arl(k, 0.0, direction=direction) >= arl0:
        return 0.0
    from scipy.optimize import brentq  # imported when first needed: scipy.optimize is slow to import

    hi = 1.0
    while siegmund_arl(k, hi, direction=direction) < arl0:
        hi *= 2.0
    root = brentq(lambda h: siegmund_arl(k, h, direction=direction) - arl0, 0.0, hi, xtol=1e-10)
    return float(root)


def run_lengths(
    z: NDArray[np.float64], k: float, h: float, *, direction: Direction = "both"
) -> NDArray[np.int64]:
    """First-alarm run lengths of a CUSUM started from zero on each row of ``z``.

    The same recursion as :class:`model.streams.Cusum` with a known baseline, vectorised over
    rows: ``result[i]`` is the 1-based position of the first alarm in row ``i`` (0 if none).

    >>> run_lengths(np.array([[0.0, 3.0, 3.0, 3.0]]), 0.5, 4.0).tolist()
    [3]
    """
    _check_direction(direction)
    z = np.atleast_2d(np.asarray(z, dtype=np.float64))
    n_rows, n_cols = z.shape
    s_hi = np.zeros(n_rows)
    s_lo = np.zeros(n_rows)
    out = np.zeros(n_rows, dtype=np.int64)
    open_ = np.ones(n_rows, dtype=bool)
    up = direction in ("both", "up")
    down = direction in ("both", "down")
    for t in range(n_cols):
        col = z[:, t]
        s_hi = np.maximum(0.0, s_hi + col - k)
        s_lo = np.maximum(0.0, s_lo - col - k)
        hit = np.zeros(n_rows, dtype=bool)
        if up:
            hit |= s_hi > h
        if down:
            hit |= s_lo > h
        new = hit & open_
        if new.any():
            out[new] = t + 1
            open_ &= ~new
            if not open_.any():
                break
    return out


def simulate_run_lengths(
    k: float,
    h: float,
    *,
    shift: float = 0.0,
    n_runs: int = 2000,
    rng: np.random.Generator,
    direction: Direction = "both",
    max_length: int = 1_000_000,
    chunk: int = 512,
) -> NDArray[np.int64]:
    """Simulated run lengths of a CUSUM on ``N(shift, 1)`` values (zero-state).

    Runs still open after ``max_length`` observations are reported as ``max_length``
    (censored); choose it well above the expected ARL.

    >>> rl = simulate_run_lengths(0.5, 4.0, shift=2.0, n_runs=500, rng=np.random.default_rng(0))
    >>> bool(2.0 < rl.mean() < 4.0)
    True
    """
    _check_direction(direction)
    out = np.full(n_runs, max_length, dtype=np.int64)
    active = np.arange(n_runs)
    s_hi = np.zeros(n_runs)
    s_lo = np.zeros(n_runs)
    up = direction in ("both", "up")
    down = direction in ("both", "down")
    done_steps = 0
    while active.size and done_steps < max_length:
        width = min(chunk, max_length - done_steps)
        z = rng.normal(shift, 1.0, size=(active.size, width))
        hi = s_hi[active]
        lo = s_lo[active]
        first = np.zeros(active.size, dtype=np.int64)
        for t in range(width):
            col = z[:, t]
            hi = np.maximum(0.0, hi + col - k)
            lo = np.maximum(0.0, lo - col - k)
            hit = np.zeros(active.size, dtype=bool)
            if up:
                hit |= hi > h
            if down:
                hit |= lo > h
            new = hit & (first == 0)
            first[new] = done_steps + t + 1
        s_hi[active] = hi
        s_lo[active] = lo
        finished = first > 0
        out[active[finished]] = first[finished]
        active = active[~finished]
        done_steps += width
    return out


__all__ = [
    "SIEGMUND_CORRECTION",
    "Direction",
    "h_for_arl0",
    "run_lengths",
    "siegmund_arl",
    "simulate_run_lengths",
]
