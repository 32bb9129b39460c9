"""Evaluating stream detectors on seeded synthetic streams: false-alarm run length and delay.

Used by ``bench/changepoint.py`` (full size) and the research notebook (small size). Compares
our :class:`~model.streams.Cusum` with peers at *matched false-alarm rates*: each peer's
threshold is calibrated (bisection on common random streams, so the measured ARL0 is a monotone
function of the threshold) until its in-control average run length equals the one measured for
our CUSUM. Peers:

- ``page_hinkley``: river's ``PageHinkley`` (``delta`` = our reference value ``k``; threshold
  calibrated);
- ``adwin``: river's ``ADWIN`` (``clock=1`` so it checks every sample; ``delta`` calibrated);
- ``ruptures_window``: ruptures' ``Window`` (``l2``) run online over a sliding buffer: every
  ``stride`` samples it scores the newest positions and alarms when a score exceeds the
  calibrated threshold.

river is an optional dependency (the ``research`` extra); it is imported only when a river peer
is built.

Streams are N(0, 1) with a warm-up of ``warmup`` samples (our CUSUM estimates its baseline
there; the peers just learn), ``pre`` more in-control samples, then the change (see
:data:`SCENARIOS`). A run's *delay* is the number of samples from the first changed one up to
and including the alarm (comparable with ARL1); runs that alarm before the change are counted as
false alarms and left out of the delays.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from model.core.errors import InputError
from model.streams.arl import siegmund_arl
from model.streams.cusum import Cusum


class OnlineDetector(Protocol):
    def update(self, x: float) -> bool: ...


@dataclass(frozen=True)
class Scenario:
    """A change planted after the in-control part: ``kind`` is mean, variance or drift.

    ``size``: the mean shift in sigma; the new standard deviation (variance); the slope in sigma
    per sample (drift).
    """

    name: str
    kind: str
    size: float

    def apply(self, noise: NDArray[np.float64]) -> NDArray[np.float64]:
        """The changed part of the stream, from standard normal ``noise``."""
        if self.kind == "mean":
            return noise + self.size
        if self.kind == "variance":
            return noise * self.size
        if self.kind == "drift":
            return noise + self.size * np.arange(1, noise.size + 1)
        raise InputError(f"unknown scenario kind {self.kind!r}")


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("mean +0.5σ", "mean", 0.5),
    Scenario("mean +1σ", "mean", 1.0),
    Scenario("mean +2σ", "mean", 2.0),
    Scenario("variance ×2", "variance", 2.0),
    Scenario("drift +0.01σ/step", "drift", 0.01),
)


# ------------------------------------------------------------------------------ detectors
class CusumPeer:
    """Our CUSUM as an :class:`OnlineDetector` (baseline from the warm-up)."""

    def __init__(self, *, arl0: float, shift: float, warmup: int) -> None:
        self.det = Cusum(shift=shift, arl0=arl0, warmup=warmup)

    def update(self, x: float) -> bool:
        return self.det.update(x) is not None


class PageHinkleyPeer:
    """river's PageHinkley, two-sided, ``delta`` = our ``k``."""

    def __init__(self, *, threshold: float, delta: float) -> None:
        from river import drift

        river_drift: Any = drift  # river's annotations are partial
        self.det: Any = river_drift.PageHinkley(
            delta=delta, threshold=threshold, min_instances=30, mode="both"
        )

    def update(self, x: float) -> bool:
        self.det.update(x)
        return bool(self.det.drift_detected)


class AdwinPeer:
    """river's ADWIN with ``delta = 10**-threshold`` (higher threshold, fewer alarms)."""

    def __init__(self, *, threshold: float) -> None:
        from river import drift

        river_drift: Any = drift
        self.det: Any = river_drift.ADWIN(delta=10.0 ** (-threshold), clock=1)

    def update(self, x: float) -> bool:
        self.det.update(x)
        return bool(self.det.drift_detected)


class RupturesWindowPeer:
    """ruptures' Window (l2) online: every ``stride`` samples, score the newest positions.

    The buffer holds the last ``width + stride`` samples, so each evaluation scores exactly the
    ``stride`` positions not scored before (each ``width // 2`` samples behind the newest one).
    """

    def __init__(self, *, threshold: float, width: int = 50, stride: int = 5) -> None:
        import ruptures as rpt

        self.threshold = threshold
        self.width = width
        self.stride = stride
        self.buffer: deque[float] = deque(maxlen=width + stride)
        self.seen = 0
        self.algo = rpt.Window(width=width, model="l2", min_size=2, jump=1)

    def update(self, x: float) -> bool:
        self.buffer.append(x)
        self.seen += 1
        if len(self.buffer) < self.buffer.maxlen or self.seen % self.stride:  # type: ignore[operator]
            return False
        score = self.algo.fit(np.fromiter(self.buffer, dtype=np.float64)).score
        return bool(np.max(score) > self.threshold)


PeerFactory = Callable[[float], OnlineDetector]


def peer_factories(*, shift: float = 1.0) -> dict[str, tuple[PeerFactory, tuple[float, float]]]:
    """Calibratable peers: name -> (factory of threshold, threshold search range)."""
    k = shift / 2.0
    return {
        "page_hinkley": (lambda t: PageHinkleyPeer(threshold=t, delta=k), (0.5, 500.0)),
        "adwin": (lambda t: AdwinPeer(threshold=t), (0.01, 60.0)),
        "ruptures_window": (lambda t: RupturesWindowPeer(threshold=t), (0.5, 500.0)),
    }


# ------------------------------------------------------------------------------ measuring
def _stream_rng(seed: int, run: int, purpose: int) -> np.random.Generator:
    return np.random.default_rng([seed, purpose, run])


def first_alarm(det: OnlineDetector, values: Sequence[float] | NDArray[np.float64]) -> int | None:
    """Index of the first sample on which ``det`` alarms, or ``None``."""
    for i, x in enumerate(np.asarray(values, dtype=np.float64).tolist()):
        if det.update(x):
            return i
    return None


def in_control_run_lengths(
    make: Callable[[], OnlineDetector],
    *,
    n_runs: int,
    warmup: int,
    max_length: int,
    seed: int,
) -> NDArray[np.int64]:
    """Run lengths counted from the first sample after the warm-up (an alarm inside the warm-up
    counts as run length 1; runs longer than ``max_length`` are censored at it)."""
    out = np.empty(n_runs, dtype=np.int64)
    for r in range(n_runs):
        values = _stream_rng(seed, r, 0).normal(0.0, 1.0, warmup + max_length)
        hit = first_alarm(make(), values)
        out[r] = max_length if hit is None else max(1, hit - warmup + 1)
    return out


def calibrate(
    factory: PeerFactory,
    target_arl0: float,
    *,
    bounds: tuple[float, float],
    n_runs: int,
    warmup: int,
    seed: int,
    iterations: int = 14,
) -> tuple[float, float]:
    """Threshold whose measured in-control ARL equals ``target_arl0`` (log-scale bisection).

    Every evaluation uses the same ``n_runs`` streams, so the measured ARL grows monotonically
    with the threshold and bisection converges. Returns ``(threshold, measured ARL0)``.
    """
    max_length = int(8 * target_arl0)

    def arl(threshold: float) -> float:
        rl = in_control_run_lengths(
            lambda: factory(threshold), n_runs=n_runs, warmup=warmup, max_length=max_length, seed=seed
        )
        return float(rl.mean())

    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    best = (math.exp(hi), arl(math.exp(hi)))
    for _ in range(iterations):
        mid = (lo + hi) / 2.0
        value = arl(math.exp(mid))
        if abs(value - target_arl0) < abs(best[1] - target_arl0):
            best = (math.exp(mid), value)
        if value < target_arl0:
            lo = mid
        else:
            hi = mid
    return best


@dataclass
class DelayStats:
    """Detection delays of one detector on one scenario."""

    scenario: str
    delays: list[int] = field(default_factory=list)
    false_alarms: int = 0
    missed: int = 0

    @property
    def median(self) -> float:
        return float(np.median(self.delays)) if self.delays else math.nan

    @property
    def mean(self) -> float:
        return float(np.mean(self.delays)) if self.delays else math.nan


def detection_delays(
    make: Callable[[], OnlineDetector],
    scenario: Scenario,
    *,
    n_runs: int,
    warmup: int,
    pre: int,
    horizon: int,
    seed: int,
) -> DelayStats:
    """Delays (samples from the first changed one, alarm included) over ``n_runs`` streams."""
    stats = DelayStats(scenario.name)
    change = warmup + pre
    for r in range(n_runs):
        rng = _stream_rng(seed, r, 1)
        values = np.r_[rng.normal(0.0, 1.0, change), scenario.apply(rng.normal(0.0, 1.0, horizon))]
        hit = first_alarm(make(), values)
        if hit is None:
            stats.missed += 1
        elif hit < change:
            stats.false_alarms += 1
        else:
            stats.delays.append(hit - change + 1)
    return stats


@dataclass
class PeerResult:
    detector: str
    setting: str
    arl0: float
    arl0_median: float
    delays: dict[str, DelayStats]


@dataclass
class Comparison:
    """Results of :func:`compare_peers`."""

    target_arl0: float
    results: list[PeerResult]
    scenarios: tuple[Scenario, ...]
    params: dict[str, Any]

    def table(self) -> str:
        """A Markdown table: measured ARL0, then median (mean) delay per scenario."""
        head = ["detector", "setting", "ARL0 mean (median)"] + [s.name for s in self.scenarios]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for res in self.results:
            cells = [res.detector, res.setting, f"{res.arl0:.0f} ({res.arl0_median:.0f})"]
            for s in self.scenarios:
                d = res.delays[s.name]
                extra = []
                if d.missed:
                    extra.append(f"{d.missed} missed")
                if d.false_alarms:
                    extra.append(f"{d.false_alarms} FA")
                note = f" [{', '.join(extra)}]" if extra else ""
                cells.append(f"{d.median:.0f} ({d.mean:.1f}){note}")
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)


def compare_peers(
    *,
    arl0: float = 500.0,
    shift: float = 1.0,
    warmup: int = 100,
    pre: int = 100,
    horizon: int = 1000,
    n_runs_arl0: int = 200,
    n_runs_delay: int = 200,
    peers: Sequence[str] = ("page_hinkley", "adwin", "ruptures_window"),
    scenarios: Sequence[Scenario] = SCENARIOS,
    seed: int = 0,
    calibration_runs: int | None = None,
    calibration_iterations: int = 14,
    log: Callable[[str], None] | None = None,
) -> Comparison:
    """Our CUSUM against peers at matched ARL0, on seeded streams.

    Our CUSUM runs with ``shift`` and ``arl0`` (h from Siegmund) and a baseline estimated from
    the warm-up; its in-control ARL is measured on ``n_runs_arl0`` streams, and each peer's
    threshold is calibrated to that measured value.
    """
    say = log or (lambda _msg: None)
    scen = tuple(scenarios)

    def ours() -> OnlineDetector:
        return CusumPeer(arl0=arl0, shift=shift, warmup=warmup)

    rl = in_control_run_lengths(ours, n_runs=n_runs_arl0, warmup=warmup, max_length=int(8 * arl0), seed=seed)
    measured = float(rl.mean())
    say(f"cusum: measured ARL0 {measured:.1f} (Siegmund target {arl0:g}, baseline from {warmup} samples)")
    results = [
        PeerResult(
            "cusum",
            f"k={shift / 2:g}, h={Cusum(shift=shift, arl0=arl0).h_:.3f}",
            measured,
            float(np.median(rl)),
            {
                s.name: detection_delays(
                    ours, s, n_runs=n_runs_delay, warmup=warmup, pre=pre, horizon=horizon, seed=seed
                )
                for s in scen
            },
        )
    ]
    factories = peer_factories(shift=shift)
    for name in peers:
        if name not in factories:
            raise InputError(f"unknown peer {name!r}; valid: {', '.join(factories)}")
        factory, bounds = factories[name]
        threshold, _ = calibrate(
            factory,
            measured,
            bounds=bounds,
            n_runs=calibration_runs or n_runs_arl0,
            warmup=warmup,
            seed=seed,
            iterations=calibration_iterations,
        )
        peer_rl = in_control_run_lengths(
            lambda f=factory, t=threshold: f(t),  # type: ignore[misc]
            n_runs=n_runs_arl0,
            warmup=warmup,
            max_length=int(8 * arl0),
            seed=seed,
        )
        peer_arl0 = float(peer_rl.mean())
        say(f"{name}: threshold {threshold:.4g} gives ARL0 {peer_arl0:.1f}")
        setting = f"delta=1e-{threshold:.2f}" if name == "adwin" else f"threshold={threshold:.3g}"
        results.append(
            PeerResult(
                name,
                setting,
                peer_arl0,
                float(np.median(peer_rl)),
                {
                    s.name: detection_delays(
                        lambda f=factory, t=threshold: f(t),  # type: ignore[misc]
                        s,
                        n_runs=n_runs_delay,
                        warmup=warmup,
                        pre=pre,
                        horizon=horizon,
                        seed=seed,
                    )
                    for s in scen
                },
            )
        )
    params = {
        "arl0": arl0,
        "shift": shift,
        "warmup": warmup,
        "pre": pre,
        "horizon": horizon,
        "n_runs_arl0": n_runs_arl0,
        "n_runs_delay": n_runs_delay,
        "seed": seed,
    }
    return Comparison(target_arl0=measured, results=results, scenarios=scen, params=params)


@dataclass(frozen=True)
class TheoryRow:
    shift: float
    siegmund: float
    measured: float
    runs: int

    @property
    def ratio(self) -> float:
        return self.measured / self.siegmund


def theory_vs_measured(
    *,
    arl0: float = 500.0,
    shift: float = 1.0,
    shifts: Sequence[float] = (0.0, 0.5, 1.0, 2.0),
    n_runs: int = 1000,
    seed: int = 0,
) -> list[TheoryRow]:
    """Our CUSUM with a known baseline (mean 0, std 1) on N(delta, 1): measured mean run length
    (zero-state, the :class:`Cusum` object itself) against Siegmund's approximation."""
    det0 = Cusum(shift=shift, arl0=arl0, mean=0.0, std=1.0)
    rows = []
    for delta in shifts:
        expected = siegmund_arl(det0.k, det0.h_, delta)
        cap = int(20 * expected) + 100
        lengths = []
        for r in range(n_runs):
            det = Cusum(shift=shift, arl0=arl0, mean=0.0, std=1.0)
            rng = _stream_rng(seed, r, 2)
            hit = None
            done = 0
            while hit is None and done < cap:
                chunk = rng.normal(delta, 1.0, 512)
                found = first_alarm(_Wrap(det), chunk)
                if found is not None:
                    hit = done + found
                done += chunk.size
            lengths.append(cap if hit is None else hit + 1)
        rows.append(TheoryRow(delta, expected, float(np.mean(lengths)), n_runs))
    return rows


@dataclass(frozen=True)
class WarmupRow:
    warmup: int | None
    arl0_mean: float
    arl0_median: float
    runs: int


def warmup_effect(
    *,
    warmups: Sequence[int | None] = (None, 50, 100, 300, 1000),
    arl0: float = 500.0,
    shift: float = 1.0,
    n_runs: int = 300,
    seed: int = 0,
) -> list[WarmupRow]:
    """In-control run lengths of our CUSUM with the baseline estimated from ``warmup`` samples
    (``None``: given exactly). Estimating sigma from few samples front-loads false alarms."""
    rows = []
    for w in warmups:
        if w is None:

            def make() -> OnlineDetector:
                return _Wrap(Cusum(shift=shift, arl0=arl0, mean=0.0, std=1.0))

            rl = in_control_run_lengths(make, n_runs=n_runs, warmup=0, max_length=int(8 * arl0), seed=seed)
        else:
            rl = in_control_run_lengths(
                lambda w=w: CusumPeer(arl0=arl0, shift=shift, warmup=w),  # type: ignore[misc]
                n_runs=n_runs,
                warmup=w,
                max_length=int(8 * arl0),
                seed=seed,
            )
        rows.append(WarmupRow(w, float(rl.mean()), float(np.median(rl)), n_runs))
    return rows


class _Wrap:
    def __init__(self, det: Cusum) -> None:
        self.det = det

    def update(self, x: float) -> bool:
        return self.det.update(x) is not None


__all__ = [
    "SCENARIOS",
    "AdwinPeer",
    "Comparison",
    "CusumPeer",
    "DelayStats",
    "OnlineDetector",
    "PageHinkleyPeer",
    "PeerResult",
    "RupturesWindowPeer",
    "Scenario",
    "TheoryRow",
    "WarmupRow",
    "calibrate",
    "compare_peers",
    "detection_delays",
    "first_alarm",
    "in_control_run_lengths",
    "peer_factories",
    "theory_vs_measured",
    "warmup_effect",
]
