"""Metric streams: extraction from traces, the online CUSUM (the stream detector, named in
:mod:`model.streams.catalog`), offline change points (ruptures).

>>> from model.streams import Cusum, h_for_arl0
>>> round(Cusum(shift=1.0, arl0=500.0, mean=0.0, std=1.0).h_, 3) == round(h_for_arl0(500.0, 0.5), 3)
True
"""

from __future__ import annotations

from model.streams.arl import h_for_arl0, run_lengths, siegmund_arl, simulate_run_lengths
from model.streams.baseline import MAD_TO_SIGMA, robust_location_scale
from model.streams.batch import detect, detect_with_statistics, episodes
from model.streams.changepoints import (
    ChangePoints,
    Confirmation,
    Segment,
    bic_penalty,
    confirm,
    detect_changepoints,
    noise_sigma,
)
from model.streams.cusum import EPISODE_CAP, Alarm, Cusum
from model.streams.metrics import (
    PER_STEP_SERIES,
    PER_TRACE_SERIES,
    MetricPoint,
    StreamKey,
    TraceMetrics,
    extract_metrics,
)
from model.streams.series import read_csv_column

__all__ = [
    "EPISODE_CAP",
    "MAD_TO_SIGMA",
    "PER_STEP_SERIES",
    "PER_TRACE_SERIES",
    "Alarm",
    "ChangePoints",
    "Confirmation",
    "Cusum",
    "MetricPoint",
    "Segment",
    "StreamKey",
    "TraceMetrics",
    "bic_penalty",
    "confirm",
    "detect",
    "detect_changepoints",
    "detect_with_statistics",
    "episodes",
    "extract_metrics",
    "h_for_arl0",
    "noise_sigma",
    "read_csv_column",
    "robust_location_scale",
    "run_lengths",
    "siegmund_arl",
    "simulate_run_lengths",
]
