"""Offline change points over a metric history with ruptures (Pelt, Binseg, Window; ``l2`` cost).

The penalty is calibrated from the noise level instead of a magic number: BIC-style
``c * sigma^2 * log(n)``, with sigma estimated robustly from first differences
(``1.4826 * MAD(diff(x)) / sqrt(2)``), which level shifts barely disturb.

On a request path keep the work bounded: only the last ``max_points`` values (2,000 by default)
are searched, with Binseg or Window (``jump=1``, tens of milliseconds). Exact Pelt with
``jump=1`` (``exact=True``) is the penalised optimum but costs about 12 s at 2,000 points on
2 cores; keep it for offline dating. ruptures' ``rbf`` cost builds an n x n matrix and is not used.

:func:`confirm` ties this to the online CUSUM: it checks an alarm against the history, dates
the start of the degradation, and re-baselines the detector on the new level.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x = np.r_[rng.normal(0, 1, 300), rng.normal(3, 1, 200)]
>>> result = detect_changepoints(x)
>>> result.changepoints
[300]
>>> [(s.start, s.end, round(s.mean, 1)) for s in result.segments]
[(0, 300, -0.0), (300, 500, 3.0)]
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict

from model.core.errors import InputError
from model.streams.baseline import MAD_TO_SIGMA
from model.streams.cusum import Alarm, Cusum

Method = Literal["pelt", "binseg", "window"]
METHODS: tuple[str, ...] = ("pelt", "binseg", "window")

DEFAULT_MAX_POINTS = 2000
DEFAULT_PENALTY_C = 3.0
"""With ``c = 3`` none of 20 pure-noise series of 1,000 points gave a change point with any of
the three methods; ``c = 2`` gave a few with Pelt."""


class Segment(BaseModel):
    """A run of values between change points: ``values[start:end]`` (``end`` exclusive)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start: int
    end: int
    mean: float


class ChangePoints(BaseModel):
    """Change points (indices of the first value of each new segment) and the segments.

    Indices refer to the whole input, also when only its last ``max_points`` were searched
    (``offset`` says where the searched part began).
    """

    model_config = ConfigDict(extra="forbid")

    changepoints: list[int]
    segments: list[Segment]
    method: str
    penalty: float
    sigma: float
    offset: int
    jump: int


class Confirmation(BaseModel):
    """What the offline search says about a CUSUM alarm (see :func:`confirm`)."""

    model_config = ConfigDict(extra="forbid")

    confirmed: bool
    start: int | None = None
    before_mean: float | None = None
    after_mean: float | None = None
    changepoints: list[int]
    rebaselined: bool = False
    reason: str = ""


def _as_series(values: Any, what: str = "values") -> NDArray[np.float64]:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{what} must be numbers: {exc}") from exc
    if arr.ndim != 1:
        raise InputError(f"{what} must be one-dimensional; got shape {arr.shape}")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise InputError(f"{what}[{int(bad[0])}] must be a finite number; got {arr[bad[0]]!r}")
    return arr


def noise_sigma(values: Any) -> float:
    """Robust noise level: ``1.4826 * MAD(diff(values)) / sqrt(2)``.

    Differencing removes the level, so a few level shifts hardly move the estimate. Falls back
    to the standard deviation of the differences (``/ sqrt 2``) when the MAD is 0 (a clean step
    signal), and is 0 only for a constant series.

    >>> import numpy as np
    >>> x = np.r_[np.random.default_rng(1).normal(0, 2, 1000), np.random.default_rng(2).normal(9, 2, 1000)]
    >>> round(noise_sigma(x), 1)
    2.0
    """
    arr = _as_series(values)
    if arr.size < 3:
        return 0.0
    diff = np.diff(arr)
    sigma = MAD_TO_SIGMA * float(np.median(np.abs(diff - np.median(diff)))) / math.sqrt(2.0)
    if sigma == 0.0:
        sigma = float(np.std(diff)) / math.sqrt(2.0)
    return sigma


def bic_penalty(values: Any, *, c: float = DEFAULT_PENALTY_C, sigma: float | None = None) -> float:
    """BIC-style penalty ``c * sigma^2 * log(n)`` for the ``l2`` cost.

    >>> round(bic_penalty([0.0, 1.0] * 50, sigma=1.0), 3)
    13.816
    """
    arr = _as_series(values)
    if not math.isfinite(c) or c <= 0:
        raise InputError(f"penalty constant c must be > 0; got {c!r}")
    s = noise_sigma(arr) if sigma is None else sigma
    return c * s * s * math.log(max(arr.size, 2))


def detect_changepoints(
    values: Any,
    *,
    method: Method | None = None,
    exact: bool = False,
    min_size: int = 5,
    penalty: float | None = None,
    c: float = DEFAULT_PENALTY_C,
    max_points: int | None = DEFAULT_MAX_POINTS,
    width: int = 100,
    jump: int | None = None,
) -> ChangePoints:
    """Change points of ``values`` in the mean, with ruptures and the ``l2`` cost.

    Parameters
    ----------
    values
        The metric history, oldest first.
    method
        ``"binseg"`` (default), ``"window"`` or ``"pelt"`` (default when ``exact``).
    exact
        Pelt with ``jump=1``: the exact penalised optimum (slow: ~12 s at 2,000 points).
    min_size
        Shortest segment allowed.
    penalty
        Penalty on each change point; default :func:`bic_penalty` with constant ``c``.
    max_points
        Search only the last ``max_points`` values (``None``: all). Indices still refer to
        the whole input.
    width
        Window length for ``"window"``.
    jump
        Candidate spacing; default 1, except 5 for non-exact Pelt (as ruptures).

    Raises
    ------
    InputError
        Non-finite values, an unknown method, or inconsistent parameters.
    """
    chosen = method if method is not None else ("pelt" if exact else "binseg")
    if chosen not in METHODS:
        raise InputError(f"method must be one of {', '.join(METHODS)}; got {chosen!r}")
    if exact and chosen != "pelt":
        raise InputError(f"exact applies to pelt only; got method {chosen!r}")
    if isinstance(min_size, bool) or not isinstance(min_size, int) or min_size < 1:
        raise InputError(f"min_size must be an integer >= 1; got {min_size!r}")
    if max_points is not None and (not isinstance(max_points, int) or max_points < 2):
        raise InputError(f"max_points must be an integer >= 2 or None; got {max_points!r}")
    if jump is None:
        jump = 5 if chosen == "pelt" and not exact else 1
    if exact:
        jump = 1
    if not isinstance(jump, int) or jump < 1:
        raise InputError(f"jump must be an integer >= 1; got {jump!r}")
    full = _as_series(values)
    offset = 0
    if max_points is not None and full.size > max_points:
        offset = full.size - max_points
    x = full[offset:]
    n = x.size
    sigma = noise_sigma(x)
    pen = bic_penalty(x, c=c, sigma=sigma) if penalty is None else float(penalty)
    if not math.isfinite(pen) or pen < 0:
        raise InputError(f"penalty must be a finite number >= 0; got {penalty!r}")

    bkps: list[int] = [n]
    constant = n == 0 or float(np.ptp(x)) == 0.0
    if not constant and n >= 2 * min_size:
        # Imported here: ruptures (and the scipy it loads) costs ~0.3-0.9 s to import, and every
        # importer of the detector registry would pay it at start-up.
        import ruptures as rpt
        from ruptures.exceptions import BadSegmentationParameters

        algo: Any
        if chosen == "pelt":
            algo = rpt.Pelt(model="l2", min_size=min_size, jump=jump)
        elif chosen == "binseg":
            algo = rpt.Binseg(model="l2", min_size=min_size, jump=jump)
        else:
            if not isinstance(width, int) or width < 2 * min_size:
                raise InputError(f"width must be an integer >= 2 * min_size; got {width!r}")
            algo = rpt.Window(model="l2", width=width, min_size=min_size, jump=jump)
        try:
            bkps = [int(b) for b in algo.fit(x).predict(pen=pen)]
        except BadSegmentationParameters:
            bkps = [n]  # too short for this min_size / width: no change point can be placed
    cps = [b + offset for b in bkps[:-1]]
    bounds = [offset, *cps, offset + n]
    segments = [
        Segment(start=a, end=b, mean=float(full[a:b].mean())) for a, b in zip(bounds, bounds[1:], strict=False)
        if b > a
    ]
    return ChangePoints(
        changepoints=cps,
        segments=segments,
        method=chosen,
        penalty=pen,
        sigma=sigma,
        offset=offset,
        jump=jump,
    )


def confirm(
    alarm: Alarm,
    history: Any,
    *,
    detector: Cusum | None = None,
    offset: int = 0,
    method: Method = "binseg",
    min_size: int = 3,
    c: float = DEFAULT_PENALTY_C,
    max_points: int | None = DEFAULT_MAX_POINTS,
    tolerance: int | None = None,
) -> Confirmation:
    """Confirm a CUSUM alarm with an offline search, date its start, and re-baseline.

    ``history[i]`` is the stream's value at index ``offset + i`` and must reach the alarm; values
    that arrived after it help (a change right before the alarm leaves a short last segment).
    The alarm is confirmed when a change point in the alarm's direction lies in
    ``[alarm.start - tolerance, alarm.index]`` (``tolerance`` defaults to the alarm's own
    start-to-index span, at least ``min_size``); the nearest one to ``alarm.start`` dates the
    degradation. If ``detector`` is given and the alarm is confirmed, it is re-baselined on the
    values from the dated start on (:meth:`Cusum.rebaseline`).

    >>> import numpy as np
    >>> from model.streams.batch import detect
    >>> rng = np.random.default_rng(3)
    >>> x = np.r_[rng.normal(0, 1, 200), rng.normal(1.5, 1, 40)]
    >>> alarm = detect(x, mean=0.0, std=1.0, arl0=500.0)[0]
    >>> alarm.index, alarm.start   # CUSUM's own estimate of the start is 3 samples early
    (202, 197)
    >>> confirm(alarm, x).start
    200
    """
    arr = _as_series(history, "history")
    last = alarm.index - offset
    if last < 0 or last >= arr.size:
        raise InputError(
            f"history covers stream indices {offset}..{offset + arr.size - 1}; "
            f"the alarm is at {alarm.index}"
        )
    found = detect_changepoints(arr, method=method, min_size=min_size, c=c, max_points=max_points)
    cps = [cp + offset for cp in found.changepoints]
    tol = max(min_size, alarm.index - alarm.start + 1) if tolerance is None else tolerance
    candidates: list[tuple[int, int, float, float]] = []
    for seg_before, seg_after in zip(found.segments, found.segments[1:], strict=False):
        cp = seg_after.start + offset
        rises = seg_after.mean > seg_before.mean
        if (rises == (alarm.direction == "up")) and alarm.start - tol <= cp <= alarm.index:
            candidates.append((abs(cp - alarm.start), cp, seg_before.mean, seg_after.mean))
    if not candidates:
        return Confirmation(
            confirmed=False,
            changepoints=cps,
            reason=(
                f"no {alarm.direction}ward change point in [{alarm.start - tol}, {alarm.index}]"
                f" (found {cps})"
            ),
        )
    _, start, before, after = min(candidates)
    rebaselined = False
    if detector is not None:
        detector.rebaseline(values=arr[start - offset :])
        rebaselined = True
    return Confirmation(
        confirmed=True,
        start=start,
        before_mean=before,
        after_mean=after,
        changepoints=cps,
        rebaselined=rebaselined,
    )


__all__ = [
    "DEFAULT_MAX_POINTS",
    "DEFAULT_PENALTY_C",
    "METHODS",
    "ChangePoints",
    "Confirmation",
    "Method",
    "Segment",
    "bic_penalty",
    "confirm",
    "detect_changepoints",
    "noise_sigma",
]
