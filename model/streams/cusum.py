"""Two-sided tabular CUSUM as a stream detector (catalog name ``"cusum"``), self-starting.

Values are standardised against a baseline ``mu0, sigma`` (given, or learnt from the stream),
then

    S+ = max(0, S+ + z - k)        S- = max(0, S- - z - k)

with reference value ``k = shift / 2`` (``shift`` = the smallest shift worth catching, in sigma
units). An alarm fires when a statistic exceeds the decision interval ``h``, which is chosen from
a target in-control average run length ``arl0`` by Siegmund's approximation
(:func:`model.streams.arl.h_for_arl0`) unless given. The alarm says where the shift most likely
began: the observation after the statistic was last zero (Page's estimate of the change time).

**Self-starting baseline.** What is not given is learnt: the first ``warmup`` observations only
seed the running mean and variance; each later observation ``x`` is standardised with the
estimates from all in-control observations before it (``n`` of them, mean ``m``, standard
deviation ``s``) and mapped through Student's t to a normal score (Hawkins, 1987)::

    T = (x - m) / (s * sqrt(1 + 1/n))  ~  t(n - 1)        z = Phi^-1(F_t(T; n - 1))

so that, for Gaussian in-control data, the ``z`` are exactly independent N(0, 1) whatever the
warm-up's length: the in-control run length (its mean *and* its median) is the one ``arl0``
promises for a known baseline. (A baseline plugged in from a short warm-up would front-load
false alarms: an underestimated sigma shortens the median run length by half at 100 points.)
A given ``mean`` (``std``) is used as it is; the other is learnt (``T ~ t(n)``; ``z`` normal).

**One alarm per change.** An alarm opens an *episode* on its side; the statistics are not
restarted, so a persistent shift keeps the statistic above ``h`` and raises nothing more. The
episode closes on :meth:`Cusum.rebaseline` or when *its own side's* statistic is back at 0:
Page's renewal point, where that side is exactly in the state it started in, so its next false
alarm is again a zero-state run length (``arl0`` on average) away. While an episode is open, the
baseline is not learnt from (a real shift is not absorbed) and the open side's statistic is held
at most at ``EPISODE_CAP * h``, so that once the process is back in control it comes back to 0
within about ``EPISODE_CAP * h / k`` observations however long the shift lasted. A crossing of
the other side is a new change (an alarm in that direction), with an episode of its own.
(Version 2.0 closed both sides together, when both statistics were 0 on the same observation:
the other side's statistic, unrelated to the alarm, kept a false alarm's episode open twice as
long, median 21 observations instead of 11, and a shift that began meanwhile raised nothing.)

An optional adaptive baseline mean (``ewma=lambda``) tracks slow, harmless level changes; it is
frozen while an episode is open. With it the t mapping is approximate.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from model.core.errors import InputError
from model.streams.arl import Direction, h_for_arl0
from model.streams.baseline import t_to_normal

EPISODE_CAP = 3.0
"""While an episode is open a statistic is held at most at this many ``h`` (see the module doc)."""

class Alarm(BaseModel):
    """A CUSUM alarm: the opening of an episode.

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
    mean, std
        The in-control baseline the alarm was measured against.
    bound
        ``mean + shift * std`` (up) or ``mean - shift * std`` (down): a single observation beyond
        it is itself out of control in the alarm's direction.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int
    direction: Literal["up", "down"]
    start: int
    statistic: float
    mean: float
    std: float
    bound: float

    def beyond(self, value: float) -> bool:
        """True when ``value`` lies beyond :attr:`bound` in the alarm's direction.

        >>> Alarm(index=5, direction="up", start=3, statistic=5.2, mean=10.0, std=2.0, bound=12.0).beyond(12.5)
        True
        """
        return value > self.bound if self.direction == "up" else value < self.bound


_STATE_KEYS = (
    "n",
    "base_n",
    "base_mean",
    "base_m2",
    "ready",
    "mu",
    "h",
    "s_hi",
    "s_lo",
    "zero_hi",
    "zero_lo",
    "open_hi",
    "open_lo",
    "alarms",
)


class Cusum:
    """Two-sided self-starting tabular CUSUM; one alarm per change.

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
        The in-control baseline. Whichever is not given is learnt (self-starting): the first
        ``warmup`` observations seed it and are not monitored.
    warmup
        Observations that seed the baseline when ``mean`` or ``std`` is missing.
    ewma
        Smoothing factor in (0, 1] of an adaptive baseline mean, or ``None`` for the running mean.
        Frozen while an episode is open.
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
    >>> [(a.index, a.direction, a.start) for a in alarms], det.alarm_open
    ([(304, 'up', 299)], True)
    """

    name: ClassVar[str] = "cusum"
    version: ClassVar[str] = "2.1"

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
        self.h_ = (
            float(self.h)
            if self.h is not None
            else h_for_arl0(float(self.arl0), self.k, direction=self.direction)
        )
        # The learnt baseline: count, mean and sum of squared deviations (Welford) of the
        # in-control observations; the given mean / std, when there are, are used instead.
        self.fixed_mean_: float | None = None if self.mean is None else float(self.mean)
        self.fixed_std_: float | None = None if self.std is None else max(float(self.std), self.min_std)
        self.base_n_ = 0
        self.base_mean_ = 0.0
        self.base_m2_ = 0.0
        self.ready_ = self._known()  # the warm-up is over (or not needed)
        self.mu_: float | None = self.fixed_mean_  # the EWMA location (only with ewma)
        self.s_hi_ = 0.0
        self.s_lo_ = 0.0
        # The statistic is zero "just before" the first monitored observation.
        first = 0 if self._known() else self.warmup
        self.zero_hi_ = first - 1
        self.zero_lo_ = first - 1
        self.open_hi_ = False
        self.open_lo_ = False
        self.alarms_ = 0

    def _known(self) -> bool:
        return self.fixed_mean_ is not None and self.fixed_std_ is not None

    @property
    def monitoring(self) -> bool:
        """True once the baseline is known (given, or after the warm-up)."""
        return self.ready_ or self._known()

    @property
    def alarm_open(self) -> bool:
        """True while an episode is open (from an alarm until the re-baseline or the return to 0)."""
        return self.open_hi_ or self.open_lo_

    def baseline(self) -> tuple[float, float] | None:
        """The in-control ``(mean, std)`` now (``None`` during the warm-up)."""
        if not self.monitoring:
            return None
        return self._location(), self._scale()

    def _location(self) -> float:
        if self.ewma is not None and self.mu_ is not None:
            return self.mu_
        return self.fixed_mean_ if self.fixed_mean_ is not None else self.base_mean_

    def _scale(self) -> float:
        if self.fixed_std_ is not None:
            return self.fixed_std_
        n = self.base_n_
        if self.fixed_mean_ is not None:  # deviations about the given mean, n degrees of freedom
            var = (self.base_m2_ + n * (self.base_mean_ - self.fixed_mean_) ** 2) / max(n, 1)
        else:
            var = self.base_m2_ / max(n - 1, 1)
        return max(math.sqrt(max(var, 0.0)), self.min_std)

    def _score(self, x: float) -> float:
        """The normal score of ``x`` against the baseline learnt so far."""
        loc, scale = self._location(), self._scale()
        if self._known():
            return (x - loc) / scale
        n = self.base_n_
        if self.fixed_std_ is not None:  # only the mean is estimated: exactly normal
            return (x - loc) / (scale * math.sqrt(1.0 + 1.0 / n))
        if self.fixed_mean_ is not None:
            return t_to_normal((x - loc) / scale, float(n))
        return t_to_normal((x - loc) / (scale * math.sqrt(1.0 + 1.0 / n)), float(n - 1))

    def _learn(self, x: float) -> None:
        if self._known():
            return
        self.base_n_ += 1
        delta = x - self.base_mean_
        self.base_mean_ += delta / self.base_n_
        self.base_m2_ += delta * (x - self.base_mean_)

    def update(self, x: float) -> Alarm | None:
        """Feed one observation; return an :class:`Alarm` if it opens an episode.

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
            self._learn(x)
            if self.base_n_ >= self.warmup:
                self.ready_ = True
                if self.ewma is not None and self.mu_ is None:
                    self.mu_ = self.base_mean_
            return None
        z = self._score(x)
        k = self.k
        cap = EPISODE_CAP * self.h_
        self.s_hi_ = max(0.0, self.s_hi_ + z - k)
        self.s_lo_ = max(0.0, self.s_lo_ - z - k)
        if self.s_hi_ == 0.0:
            self.zero_hi_ = i
        if self.s_lo_ == 0.0:
            self.zero_lo_ = i
        was_open = self.alarm_open
        # An open side is held at the cap, and its episode closes when its own statistic is
        # back at 0: Page's renewal point, where that side is in the state it started in.
        if self.open_hi_:
            self.s_hi_ = min(self.s_hi_, cap)
            self.open_hi_ = self.s_hi_ > 0.0
        if self.open_lo_:
            self.s_lo_ = min(self.s_lo_, cap)
            self.open_lo_ = self.s_lo_ > 0.0
        up = self.direction != "down" and self.s_hi_ > self.h_ and not self.open_hi_
        down = self.direction != "up" and self.s_lo_ > self.h_ and not self.open_lo_
        if not (up or down):
            if not was_open:  # in control: learn from it (an episode's observations are not)
                if self.ewma is not None and self.mu_ is not None:
                    self.mu_ += self.ewma * (x - self.mu_)
                self._learn(x)
            return None
        if up and down:  # both crossed on one step: report the larger excursion
            up = self.s_hi_ >= self.s_lo_
            down = not up
        mean, std = self._location(), self._scale()
        alarm = Alarm(
            index=i,
            direction="up" if up else "down",
            start=(self.zero_hi_ if up else self.zero_lo_) + 1,
            statistic=self.s_hi_ if up else self.s_lo_,
            mean=mean,
            std=std,
            bound=mean + self.shift * std if up else mean - self.shift * std,
        )
        if up:
            self.open_hi_ = True
            self.s_hi_ = min(self.s_hi_, cap)
        else:
            self.open_lo_ = True
            self.s_lo_ = min(self.s_lo_, cap)
        self.alarms_ += 1
        return alarm

    def rebaseline(
        self,
        *,
        mean: float | None = None,
        std: float | None = None,
        values: Any = None,
    ) -> None:
        """Adopt a new in-control baseline, close the open episode and restart both statistics.

        ``values`` (observations of the new level) restart the learnt baseline from their mean
        and standard deviation; when they are constant (or a single one) the standard deviation
        is kept. ``mean`` / ``std`` fix the baseline's mean / standard deviation from now on.

        Raises
        ------
        InputError
            Non-finite values, ``std <= 0``, or nothing to take a spread from.
        """
        for name, value in (("mean", mean), ("std", std)):
            if value is not None and (not math.isfinite(value) or (name == "std" and value <= 0)):
                raise InputError(f"rebaseline needs a finite mean and std > 0; got {name}={value!r}")
        if values is not None:
            arr = np.asarray(values, dtype=np.float64).ravel()
            if arr.size == 0 or not np.all(np.isfinite(arr)):
                raise InputError("rebaseline needs finite values (at least one)")
            old_scale = self._scale() if self.monitoring else None
            n, m = int(arr.size), float(arr.mean())
            m2 = float(((arr - m) ** 2).sum())
            if n < 2 or m2 <= 0.0:  # constant values say nothing of the spread: keep the old one
                if std is None and self.fixed_std_ is None:
                    if old_scale is None:
                        raise InputError("rebaseline: constant values and no spread yet; give std")
                    n = max(n, 2)
                    m2 = old_scale**2 * (n - 1)
            else:
                self.fixed_std_ = None
            self.fixed_mean_ = None
            self.base_n_, self.base_mean_, self.base_m2_ = n, m, m2
            self.mu_ = m if self.ewma is not None else None
            self.ready_ = True
        if mean is not None:
            self.fixed_mean_ = float(mean)
            self.mu_ = float(mean)
        if std is not None:
            self.fixed_std_ = max(float(std), self.min_std)
        if not self.monitoring:
            raise InputError("rebaseline needs a mean and std (or values) before the warm-up ends")
        if self.ewma is not None and self.mu_ is None:
            self.mu_ = self._location()
        self.s_hi_ = 0.0
        self.s_lo_ = 0.0
        self.zero_hi_ = self.n_ - 1
        self.zero_lo_ = self.n_ - 1
        self.open_hi_ = self.open_lo_ = False

    # -- persistence ------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """JSON-serialisable running state (with the parameters, to check on restore)."""
        return {
            "detector": self.name,
            "version": self.version,
            "params": self.get_params(),
            "n": self.n_,
            "base_n": self.base_n_,
            "base_mean": self.base_mean_,
            "base_m2": self.base_m2_,
            "ready": self.ready_,
            "fixed_mean": self.fixed_mean_,
            "fixed_std": self.fixed_std_,
            "mu": self.mu_,
            "h": self.h_,
            "s_hi": self.s_hi_,
            "s_lo": self.s_lo_,
            "zero_hi": self.zero_hi_,
            "zero_lo": self.zero_lo_,
            "open_hi": self.open_hi_,
            "open_lo": self.open_lo_,
            "alarms": self.alarms_,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from a state returned by :meth:`get_state` of a detector with equal params.

        A state saved by version 1.0 (plug-in baseline, restart after each alarm) is carried
        over: its baseline becomes the learnt one (as if estimated from the warm-up), its open
        alarm an episode on both sides.

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
        if state.get("version") == "1.0":
            state = self._from_v1(state)
        missing = [key for key in _STATE_KEYS if key not in state]
        if missing:
            raise InputError(f"state misses {', '.join(missing)}")

        def opt(value: Any) -> float | None:
            return None if value is None else float(value)

        try:
            n = int(state["n"])
            base = (int(state["base_n"]), float(state["base_mean"]), float(state["base_m2"]))
            ready = bool(state["ready"])
            fixed = (opt(state.get("fixed_mean", self.mean)), opt(state.get("fixed_std", self.std)))
            mu = opt(state["mu"])
            h = float(state["h"])
            s = (float(state["s_hi"]), float(state["s_lo"]))
            zeros = (int(state["zero_hi"]), int(state["zero_lo"]))
            opened = (bool(state["open_hi"]), bool(state["open_lo"]))
            alarms = int(state["alarms"])
        except (TypeError, ValueError) as exc:
            raise InputError(f"state has a field of the wrong type: {exc}") from exc
        self.n_ = n
        self.base_n_, self.base_mean_, self.base_m2_ = base
        self.ready_ = ready
        self.fixed_mean_, self.fixed_std_ = fixed
        self.mu_ = mu
        self.h_ = h
        self.s_hi_, self.s_lo_ = s
        self.zero_hi_, self.zero_lo_ = zeros
        self.open_hi_, self.open_lo_ = opened
        self.alarms_ = alarms

    def _from_v1(self, old: dict[str, Any]) -> dict[str, Any]:
        try:
            warm = [float(v) for v in old.get("warmup_values") or []]
            mu, sigma = old.get("mu"), old.get("sigma")
            if mu is None or sigma is None:  # still in the warm-up: replay it
                base_n = len(warm)
                base_mean = float(np.mean(warm)) if warm else 0.0
                base_m2 = float(((np.asarray(warm) - base_mean) ** 2).sum()) if warm else 0.0
            else:
                base_n = max(self.warmup, 2)
                base_mean, base_m2 = float(mu), float(sigma) ** 2 * (base_n - 1)
            was_open = bool(old.get("alarm_open"))
            return {
                "n": old["n"],
                "base_n": base_n,
                "base_mean": base_mean,
                "base_m2": base_m2,
                "ready": mu is not None and sigma is not None,
                "fixed_mean": self.mean,
                "fixed_std": self.std,
                "mu": mu if self.ewma is not None else self.mean,
                "h": old["h"],
                "s_hi": old["s_hi"],
                "s_lo": old["s_lo"],
                "zero_hi": old["zero_hi"],
                "zero_lo": old["zero_lo"],
                "open_hi": was_open,
                "open_lo": was_open,
                "alarms": old["alarms"],
            }
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"version 1.0 state misses or mistypes a field: {exc}") from exc

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Cusum:
        """Build a detector from :meth:`get_state`'s output."""
        params = state.get("params")
        if not isinstance(params, dict):
            raise InputError("state has no params")
        det = cls(**params)
        det.set_state(state)
        return det


__all__ = ["EPISODE_CAP", "Alarm", "Cusum"]
