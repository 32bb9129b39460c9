"""A fresh :class:`~model.streams.cusum.Cusum` over a whole series at once: its alarms, its
episodes, its statistics (what ``triage cusum``, the benchmarks and the notebooks run)."""

from __future__ import annotations

from typing import Any

import numpy as np

from model.streams.cusum import Alarm, Cusum


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


def episodes(values: Any, **params: Any) -> list[tuple[Alarm, int | None]]:
    """Run a fresh :class:`Cusum` over ``values``: each alarm with the index at which its episode
    closed (its side's statistic back at 0), ``None`` while still open at the end.

    >>> [(a.index, closed) for a, closed in episodes([0.0] * 3 + [3.0] * 3 + [0.0] * 16, mean=0.0, std=1.0, h=4.0)]
    [(4, 20)]
    """
    det = Cusum(**params)
    out: list[tuple[Alarm, int | None]] = []
    still_open: dict[str, list[int]] = {"up": [], "down": []}  # positions in ``out``, per side
    for i, x in enumerate(np.asarray(values, dtype=np.float64).tolist()):
        was = {"up": det.open_hi_, "down": det.open_lo_}
        alarm = det.update(x)
        now = {"up": det.open_hi_, "down": det.open_lo_}
        for side, positions in still_open.items():
            if was[side] and not now[side]:
                for j in positions:
                    out[j] = (out[j][0], i)
                positions.clear()
        if alarm is not None:
            still_open[alarm.direction].append(len(out))
            out.append((alarm, None))
    return out


def detect_with_statistics(values: Any, **params: Any) -> tuple[list[Alarm], Any, Any]:
    """Like :func:`detect`, and also the statistics ``S+`` and ``S-`` after each observation
    (NaN during the warm-up).

    >>> alarms, s_hi, s_lo = detect_with_statistics([0.0, 2.0, 2.0, 2.0, 2.0], mean=0.0, std=1.0, h=4.0)
    >>> s_hi.tolist(), [a.index for a in alarms]
    ([0.0, 1.5, 3.0, 4.5, 6.0], [3])
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
    return alarms, s_hi, s_lo


__all__ = ["detect", "detect_with_statistics", "episodes"]
