"""Figures for the change-point notebook and benchmark (matplotlib, imported when called).

matplotlib is in the ``research`` / ``train`` extras, not the serving install.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from model.streams.arl import h_for_arl0, siegmund_arl, simulate_run_lengths
from model.streams.changepoints import ChangePoints
from model.streams.cusum import Alarm
from model.training.streams.evaluation import Comparison


def _pyplot() -> Any:
    import matplotlib.pyplot as plt

    return plt


def plot_arl_curves(
    *,
    ks: Sequence[float] = (0.25, 0.5, 1.0),
    shift: float = 1.0,
    arl0_grid: Sequence[float] = (50, 100, 200, 370, 500, 1000, 2000, 5000),
    simulate_runs: int = 0,
    seed: int = 0,
) -> Any:
    """Left: in-control ARL0 against h for several k (Siegmund; dots: simulation when
    ``simulate_runs`` > 0). Right: the trade-off — delay (ARL1 at ``shift``) against ARL0."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    rng = np.random.default_rng(seed)
    for k in ks:
        hs = np.linspace(0.5, 10.0, 60)
        (line,) = left.plot(hs, [siegmund_arl(k, h) for h in hs], label=f"k = {k:g}")
        if simulate_runs:
            h_pts = [h_for_arl0(a, k) for a in (100.0, 500.0)]
            sims = [simulate_run_lengths(k, h, n_runs=simulate_runs, rng=rng).mean() for h in h_pts]
            left.plot(h_pts, sims, "o", color=line.get_color())
        arl1 = [siegmund_arl(k, h_for_arl0(a, k), shift) for a in arl0_grid]
        right.plot(arl0_grid, arl1, "-o", color=line.get_color(), label=f"k = {k:g}")
    left.set(yscale="log", xlabel="decision interval h (σ)", ylabel="ARL0 (samples between false alarms)",
             title="In-control ARL, two-sided (Siegmund" + ("; dots: simulated)" if simulate_runs else ")"))
    right.set(xscale="log", xlabel="ARL0 (false-alarm spacing)", ylabel=f"ARL1 at a {shift:g}σ shift",
              title="Delay bought with false alarms")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    return fig


def plot_stream(
    values: Any,
    *,
    title: str,
    alarms: Sequence[Alarm] = (),
    s_hi: Any = None,
    s_lo: Any = None,
    h: float | None = None,
    change_at: int | None = None,
    changepoints: ChangePoints | None = None,
    warmup: int | None = None,
    episodes: Sequence[tuple[Alarm, int | None]] = (),
) -> Any:
    """A metric stream with CUSUM alarms (and their estimated starts), their episodes (shaded from
    the alarm to where it closed), the planted change, the ruptures segments, and the CUSUM
    statistics underneath."""
    plt = _pyplot()
    with_stats = s_hi is not None
    fig, axes = plt.subplots(
        2 if with_stats else 1, 1, figsize=(11, 5.5 if with_stats else 3.2), sharex=True, squeeze=False
    )
    ax = axes[0, 0]
    x = np.asarray(values, dtype=np.float64)
    ax.plot(x, lw=0.8, color="0.45", label="metric")
    if warmup:
        ax.axvspan(0, warmup, color="tab:green", alpha=0.08, label="warm-up (baseline)")
    if change_at is not None:
        ax.axvline(change_at, color="k", ls="--", lw=1, label=f"injected change ({change_at})")
    if changepoints is not None:
        for seg in changepoints.segments:
            ax.hlines(seg.mean, seg.start, seg.end - 1, color="tab:blue", lw=2)
        for cp in changepoints.changepoints:
            ax.axvline(cp, color="tab:blue", lw=1.5, alpha=0.7)
        ax.plot([], [], color="tab:blue", lw=2, label=f"ruptures segments ({changepoints.method})")
    for i, (a, closed) in enumerate(episodes):
        end = closed if closed is not None else x.size - 1
        ax.axvspan(a.index, end, color="tab:red", alpha=0.1, label="alarm episode" if i == 0 else None)
    for i, a in enumerate(alarms):
        ax.axvline(a.index, color="tab:red", lw=0.8, alpha=0.6, label="CUSUM alarm" if i == 0 else None)
        ax.plot([a.start], [x[a.start]], marker="|", ms=14, color="tab:red")
    ax.set(title=title)
    ax.legend(loc="upper left", fontsize=8)
    if with_stats:
        sx = axes[1, 0]
        sx.plot(s_hi, color="tab:red", lw=1, label="S+ (upward)")
        sx.plot(s_lo, color="tab:purple", lw=1, label="S- (downward)")
        if h is not None:
            sx.axhline(h, color="k", lw=1, ls=":", label=f"h = {h:.2f}")
        sx.set(xlabel="trace index", ylabel="CUSUM (σ)")
        sx.legend(loc="upper left", fontsize=8)
    else:
        ax.set(xlabel="trace index")
    fig.tight_layout()
    return fig


def plot_peer_delays(comparison: Comparison) -> Any:
    """Grouped bars: median detection delay per scenario and detector, at matched ARL0."""
    plt = _pyplot()
    names = [s.name for s in comparison.scenarios]
    n_det = len(comparison.results)
    width = 0.8 / max(n_det, 1)
    fig, ax = plt.subplots(figsize=(11, 4))
    pos = np.arange(len(names))
    for j, res in enumerate(comparison.results):
        med = [res.delays[n].median for n in names]
        ax.bar(pos + (j - (n_det - 1) / 2) * width, med, width, label=f"{res.detector} (ARL0 {res.arl0:.0f})")
    ax.set_xticks(pos, names)
    ax.set(yscale="log", ylabel="median delay (samples, alarm included)",
           title=f"Detection delay at matched false-alarm rate (ARL0 ≈ {comparison.target_arl0:.0f})")
    from matplotlib.ticker import ScalarFormatter

    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


__all__ = ["plot_arl_curves", "plot_peer_delays", "plot_stream"]
