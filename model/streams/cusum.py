"""Two-sided tabular CUSUM as a stream detector (registry name ``"cusum"``).

Values are standardised with a baseline ``mu0, sigma`` (given, or estimated robustly from a
warm-up "golden" window: median and 1.4826 * MAD), then

    S+ = max(0, S+ + z - k)        S- = max(0, S- - z - k)

with reference value ``k = shift / 2`` (``shift`` = the smallest shift worth catching, in sigma
units). An alarm fires when a statistic exceeds the decision interval ``h``, which is chosen from
a target in-control average run length ``arl0`` by Siegmund's approximation
(:func:`model.streams.arl.h_for_arl0`) unless given. After an alarm both statistics restart at
zero. The alarm says where the shift most likely began: the observation after the statistic was
last zero (Page's estimate of the change time).

An optional adaptive baseline (``ewma=lambda``) tracks slow, harmless level changes of the mean;
it is frozen from the first alarm until :meth:`Cusum.rebaseline` is called (for instance after
:func:`model.streams.confirm` has dated the change), so a real shift is not absorbed.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from model.detectors.base import register_stream_detector
from model.errors import InputError
from model.streams.arl import Direction, h_for_arl0

MAD_TO_SIGMA = 1.4826
"""Scale factor from the median absolute deviation to sigma for Gaussian data."""


class Alarm(BaseModel):
    """A CUSUM alarm.

    Attributes
    ----------
    index
        0-based index, in the stream, of the observation that raised the alarm.
    direction
        ``"up"`` (the mean rose) or ``"down"``.
    start
        0-based index where the shift most likely began: the first observation after the
        statistic was last zero.
    statistic
        The CUSUM statistic at the alarm (sigma units; above ``h``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int
    direction: Literal["up", "down"]
    start: int
    statistic: float


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


_STATE_KEYS = (
    "n",
    "warmup_values",
    "mu",
    "sigma",
    "h",
    "s_hi",
    "s_lo",
    "zero_hi",
    "zero_lo",
    "alarm_open",
    "alarms",
)


@register_stream_detector
class Cusum:
    """Two-sided tabular CUSUM on standardised values.

    Parameters
    ----------
    shift
        Smallest mean shift worth catching, in sigma units; the reference value is ``k = shift/2``.
    arl0
        Target in-control average run length (observations between false alarms); sets ``h``
        via Siegmund's approximation. Ignored when ``h`` is given.
    h
        Decision interval in sigma units, if you want to set it directly.
    mean, std
        The in-control baseline. Whichever is not given is estimated from the first ``warmup``
        observations (median, 1.4826 * MAD), which are then not monitored.
    warmup
        Size of the warm-up window used when ``mean`` or ``std`` is missing.
    ewma
        Smoothing factor in (0, 1] of an adaptive baseline mean, or ``None`` for a fixed baseline.
        Frozen while an alarm is open.
    direction
        ``"both"``, ``"up"`` (only rises alarm) or ``"down"``.
    min_std
        Floor for sigma, so that a constant warm-up window does not divide by zero.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(2)
    >>> stream = np.r_[rng.normal(10.0, 2.0, 300), rng.normal(12.0, 2.0, 100)]
    >>> det = Cusum(shift=1.0, arl0=500.0, warmup=100)
    >>> alarms = [a for x in stream if (a := det.update(float(x))) is not None]
    >>> alarms[0].index, alarms[0].direction, alarms[0].start
    (304, 'up', 299)
    """

    name: ClassVar[str] = "cusum"
    version: ClassVar[str] = "1.0"

    def __init__(
        self,
        *,
        shift: float = 1.0,
        arl0: float = 500.0,
        h: float | None = None,
        mean: float | None = None,
        std: float | None = None,
        warmup: int = 100,
        ewma: float | None = None,
        direction: Direction = "both",
        min_std: float = 1e-9,
    ) -> None:
        self.shift = shift
        self.arl0 = arl0
        self.h = h
        self.mean = mean
        self.std = std
        self.warmup = warmup
        self.ewma = ewma
        self.direction = direction
        self.min_std = min_std
        self._check_params()
        self.reset()

    # -- parameters -------------------------------------------------------------------------
    def _check_params(self) -> None:
        def finite(name: str, value: Any) -> None:
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise InputError(f"{name} must be a finite number; got {value!r}")

        finite("shift", self.shift)
        if self.shift <= 0:
            raise InputError(f"shift must be > 0 (in sigma units); got {self.shift!r}")
        if self.h is None:
            finite("arl0", self.arl0)
            if self.arl0 <= 1:
                raise InputError(f"arl0 must be > 1; got {self.arl0!r}")
        else:
            finite("h", self.h)
            if self.h <= 0:
                raise InputError(f"h must be > 0; got {self.h!r}")
        if self.mean is not None:
            finite("mean", self.mean)
        if self.std is not None:
            finite("std", self.std)
            if self.std <= 0:
                raise InputError(f"std must be > 0; got {self.std!r}")
        needs_warmup = self.mean is None or self.std is None
        bad_warmup = isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 2
        if needs_warmup and bad_warmup:
            raise InputError(
                f"warmup must be an integer >= 2 when mean or std is not given; got {self.warmup!r}"
            )
        if self.ewma is not None:
            finite("ewma", self.ewma)
            if not 0 < self.ewma <= 1:
                raise InputError(f"ewma must be in (0, 1]; got {self.ewma!r}")
        if self.direction not in ("both", "up", "down"):
            raise InputError(f"direction must be 'both', 'up' or 'down'; got {self.direction!r}")
        finite("min_std", self.min_std)

    def get_params(self) -> dict[str, Any]:
        """The keyword arguments this detector was built with."""
        return {
            "shift": self.shift,
            "arl0": self.arl0,
            "h": self.h,
            "mean": self.mean,
            "std": self.std,
            "warmup": self.warmup,
            "ewma": self.ewma,
            "direction": self.direction,
            "min_std": self.min_std,
        }

    @property
    def k(self) -> float:
        """Reference value, ``shift / 2`` (sigma units)."""
        return self.shift / 2.0

    # -- running state ----------------------------------------------------------------------
    def reset(self) -> None:
        """Forget everything seen: back to the warm-up (or the given baseline)."""
        self.n_ = 0
        self.warmup_values_: list[float] = []
        self.h_ = (
            float(self.h)
            if self.h is not None
            else h_for_arl0(float(self.arl0), self.k, direction=self.direction)
        )
        needs_warmup = self.mean is None or self.std is None
        self.mu_: float | None = None if needs_warmup else float(self.mean)  # type: ignore[arg-type]
        self.sigma_: float | None = (
            None if needs_warmup else max(float(self.std), self.min_std)  # type: ignore[arg-type]
        )
        self.s_hi_ = 0.0
        self.s_lo_ = 0.0
        # The statistic is zero "just before" the first monitored observation.
        first = self.warmup if needs_warmup else 0
        self.zero_hi_ = first - 1
        self.zero_lo_ = first - 1
        self.alarm_open_ = False
        self.alarms_ = 0

    @property
    def monitoring(self) -> bool:
        """True once the baseline is known (after the warm-up)."""
        return self.mu_ is not None and self.sigma_ is not None

    def _finish_warmup(self) -> None:
        med, scale = robust_location_scale(self.warmup_values_)
        self.mu_ = float(self.mean) if self.mean is not None else med
        self.sigma_ = max(float(self.std) if self.std is not None else scale, self.min_std)
        self.warmup_values_ = []

    def update(self, x: float) -> Alarm | None:
        """Feed one observation; return an :class:`Alarm` if it raises one.

        Raises
        ------
        InputError
            ``x`` is not a finite number.
        """
        x = float(x)
        if not math.isfinite(x):
            raise InputError(f"observation {self.n_} must be a finite number; got {x!r}")
        i = self.n_
        self.n_ += 1
        if not self.monitoring:
            self.warmup_values_.append(x)
            if len(self.warmup_values_) >= self.warmup:
                self._finish_warmup()
            return None
        mu = self.mu_
        sigma = self.sigma_
        assert mu is not None and sigma is not None
        z = (x - mu) / sigma
        k = self.k
        self.s_hi_ = max(0.0, self.s_hi_ + z - k)
        self.s_lo_ = max(0.0, self.s_lo_ - z - k)
        if self.s_hi_ == 0.0:
            self.zero_hi_ = i
        if self.s_lo_ == 0.0:
            self.zero_lo_ = i
        if self.ewma is not None and not self.alarm_open_:
            self.mu_ = mu + self.ewma * (x - mu)
        up = self.direction != "down" and self.s_hi_ > self.h_
        down = self.direction != "up" and self.s_lo_ > self.h_
        if not (up or down):
            return None
        if up and down:  # both crossed on one step: report the larger excursion
            up = self.s_hi_ >= self.s_lo_
        alarm = Alarm(
            index=i,
            direction="up" if up else "down",
            start=(self.zero_hi_ if up else self.zero_lo_) + 1,
            statistic=self.s_hi_ if up else self.s_lo_,
        )
        # Restart cleanly: both sides from zero, as if a fresh chart began after this point.
        self.s_hi_ = 0.0
        self.s_lo_ = 0.0
        self.zero_hi_ = i
        self.zero_lo_ = i
        self.alarm_open_ = True
        self.alarms_ += 1
        return alarm

    def rebaseline(
        self,
        *,
        mean: float | None = None,
        std: float | None = None,
        values: Any = None,
    ) -> None:
        """Adopt a new in-control baseline and close the open alarm.

        ``mean`` / ``std`` set it directly; otherwise they are estimated from ``values``
        (median, 1.4826 * MAD); ``std`` keeps the current sigma when neither is given or when
        fewer than 10 values are supplied.
        """
        if values is not None:
            med, scale = robust_location_scale(values)
            if mean is None:
                mean = med
            if std is None and len(np.asarray(values)) >= 10 and scale > 0:
                std = scale
        if mean is None:
            mean = self.mu_
        if std is None:
            std = self.sigma_
        if mean is None or std is None:
            raise InputError("rebaseline needs a mean and std (or values) before the warm-up ends")
        if not (math.isfinite(mean) and math.isfinite(std)) or std <= 0:
            raise InputError(f"rebaseline needs a finite mean and std > 0; got {mean!r}, {std!r}")
        self.mu_ = float(mean)
        self.sigma_ = max(float(std), self.min_std)
        self.warmup_values_ = []
        self.s_hi_ = 0.0
        self.s_lo_ = 0.0
        self.zero_hi_ = self.n_ - 1
        self.zero_lo_ = self.n_ - 1
        self.alarm_open_ = False

    # -- persistence ------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """JSON-serialisable running state (with the parameters, to check on restore)."""
        return {
            "detector": self.name,
            "version": self.version,
            "params": self.get_params(),
            "n": self.n_,
            "warmup_values": list(self.warmup_values_),
            "mu": self.mu_,
            "sigma": self.sigma_,
            "h": self.h_,
            "s_hi": self.s_hi_,
            "s_lo": self.s_lo_,
            "zero_hi": self.zero_hi_,
            "zero_lo": self.zero_lo_,
            "alarm_open": self.alarm_open_,
            "alarms": self.alarms_,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from a state returned by :meth:`get_state` of a detector with equal params.

        Raises
        ------
        InputError
            The state is for another detector, other parameters, or misses a field.
        """
        if state.get("detector") != self.name:
            raise InputError(f"state is for detector {state.get('detector')!r}, not {self.name!r}")
        if state.get("params") != self.get_params():
            raise InputError(
                f"state was saved with params {state.get('params')!r}; this detector has "
                f"{self.get_params()!r} (build it with Cusum.from_state)"
            )
        missing = [key for key in _STATE_KEYS if key not in state]
        if missing:
            raise InputError(f"state misses {', '.join(missing)}")
        try:
            n = int(state["n"])
            warmup_values = [float(v) for v in state["warmup_values"]]
            mu = None if state["mu"] is None else float(state["mu"])
            sigma = None if state["sigma"] is None else float(state["sigma"])
            h = float(state["h"])
            s_hi = float(state["s_hi"])
            s_lo = float(state["s_lo"])
            zero_hi = int(state["zero_hi"])
            zero_lo = int(state["zero_lo"])
            alarm_open = bool(state["alarm_open"])
            alarms = int(state["alarms"])
        except (TypeError, ValueError) as exc:
            raise InputError(f"state has a field of the wrong type: {exc}") from exc
        self.n_ = n
        self.warmup_values_ = warmup_values
        self.mu_ = mu
        self.sigma_ = sigma
        self.h_ = h
        self.s_hi_ = s_hi
        self.s_lo_ = s_lo
        self.zero_hi_ = zero_hi
        self.zero_lo_ = zero_lo
        self.alarm_open_ = alarm_open
        self.alarms_ = alarms

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Cusum:
        """Build a detector from :meth:`get_state`'s output."""
        params = state.get("params")
        if not isinstance(params, dict):
            raise InputError("state has no params")
        det = cls(**params)
        det.set_state(state)
        return det


def detect(values: Any, **params: Any) -> list[Alarm]:
    """Run a fresh :class:`Cusum` over ``values`` and return every alarm.

    >>> detect([0.0, 0.0, 5.0, 5.0, 5.0], mean=0.0, std=1.0, h=4.0)[0].index
    2
    """
    det = Cusum(**params)
    alarms: list[Alarm] = []
    for x in np.asarray(values, dtype=np.float64).tolist():
        alarm = det.update(x)
        if alarm is not None:
            alarms.append(alarm)
    return alarms


def detect_with_statistics(values: Any, **params: Any) -> tuple[list[Alarm], Any, Any]:
    """Like :func:`detect`, and also the statistics ``S+`` and ``S-`` after each observation
    (NaN during the warm-up). At an alarm the alarming side shows the crossing value; the chart
    restarts from zero on the next observation.

    >>> alarms, s_hi, s_lo = detect_with_statistics([0.0, 2.0, 2.0, 2.0, 2.0], mean=0.0, std=1.0, h=4.0)
    >>> s_hi.tolist(), [a.index for a in alarms]
    ([0.0, 1.5, 3.0, 4.5, 1.5], [3])
    """
    det = Cusum(**params)
    arr = np.asarray(values, dtype=np.float64)
    s_hi = np.full(arr.size, np.nan)
    s_lo = np.full(arr.size, np.nan)
    alarms: list[Alarm] = []
    for i, x in enumerate(arr.tolist()):
        was_monitoring = det.monitoring
        alarm = det.update(x)
        if was_monitoring:
            s_hi[i] = det.s_hi_
            s_lo[i] = det.s_lo_
        if alarm is not None:
            alarms.append(alarm)
            # Show the crossing, not the restarted zero.
            if alarm.direction == "up":
                s_hi[i] = alarm.statistic
            else:
                s_lo[i] = alarm.statistic
    return alarms, s_hi, s_lo


__all__ = ["MAD_TO_SIGMA", "Alarm", "Cusum", "detect", "detect_with_statistics", "robust_location_scale"]
