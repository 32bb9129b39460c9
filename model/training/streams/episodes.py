"""Scoring a detector's alarm episodes on streams with a held shift (``bench/changepoint.py``).

Each stream is ``warmup`` + ``in_control`` in-control points, then a shift that stays: an alarm in
the in-control points is a false alarm; a new alarm in the shift's direction at or after the change
is the detection, and its delay counts the alarm's own sample. :func:`shifted_streams` makes the
seeded streams, :func:`score_episodes` scores the alarms (:class:`EpisodeScore`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class EpisodeScore:
    """Alarms of many streams, each ``warmup`` + ``in_control`` in-control points then a held shift.

    ``false_alarms``: alarms in the in-control points (all streams); ``streams_with_false_alarm``;
    ``new_alarm``: streams with an alarm in the shift's direction at or after the change (the
    only thing counted as a detection); ``already_open``: streams without one because an episode
    opened by a false alarm in that direction just before was still open at the change and
    stayed open through the shift (missed: that alarm was raised before the change, so it says
    nothing about it); ``delays``: change → the new alarm, alarm included; ``extra``: alarms in
    the shifted part beyond the one allowed (what "one alarm per change" rules out).
    """

    streams: int
    in_control: int
    arl0: float
    false_alarms: int
    streams_with_false_alarm: int
    new_alarm: int
    already_open: int
    delays: tuple[int, ...]
    extra: int

    @property
    def detected(self) -> int:
        """Streams with a new alarm in the shift's direction raised at or after the change."""
        return self.new_alarm

    @property
    def median_delay(self) -> float:
        return float(np.median(self.delays)) if self.delays else math.nan

    def false_alarm_interval(self) -> tuple[int, int]:
        """95 % interval of the in-control alarm count: Binomial(points, 1 / ARL0)."""
        from scipy.stats import binom

        lo, hi = binom.interval(0.95, self.streams * self.in_control, 1.0 / self.arl0)
        return int(lo), int(hi)

    def false_alarm_stream_interval(self) -> tuple[int, int]:
        """95 % interval of the streams with a false alarm: Binomial(streams, P(RL <= in_control)),
        the run length geometric with mean ARL0."""
        from scipy.stats import binom

        p = 1.0 - (1.0 - 1.0 / self.arl0) ** self.in_control
        lo, hi = binom.interval(0.95, self.streams, p)
        return int(lo), int(hi)


def score_episodes(
    alarms: Sequence[Sequence[tuple[int, str, int | None]]],
    *,
    warmup: int,
    in_control: int,
    arl0: float,
    direction: str = "up",
) -> EpisodeScore:
    """Score each stream's alarms ``(index, direction, closed)`` against a change at
    ``warmup + in_control`` (``closed``: where the alarm's episode closed, ``None`` if never).

    >>> s = score_episodes([[(250, "down", 270), (605, "up", None)], [(598, "up", None)]],
    ...                    warmup=200, in_control=400, arl0=500.0)
    >>> (s.false_alarms, s.new_alarm, s.already_open, s.delays, s.extra)
    (2, 1, 1, (6,), 0)
    """
    change = warmup + in_control
    false_alarms = with_fa = new = already = extra = 0
    delays: list[int] = []
    for stream in alarms:
        before = [a for a in stream if warmup <= a[0] < change]
        after = [a for a in stream if a[0] >= change]
        false_alarms += len(before)
        with_fa += bool(before)
        ours = [a for a in after if a[1] == direction]
        spanning = any(a[1] == direction and (a[2] is None or a[2] > change) for a in before)
        if ours:
            new += 1
            delays.append(ours[0][0] - change + 1)
            extra += len(after) - 1
        elif spanning:
            already += 1
            extra += len(after)
        else:
            extra += len(after)
    return EpisodeScore(
        streams=len(alarms),
        in_control=in_control,
        arl0=arl0,
        false_alarms=false_alarms,
        streams_with_false_alarm=with_fa,
        new_alarm=new,
        already_open=already,
        delays=tuple(delays),
        extra=extra,
    )


def shifted_streams(
    n_streams: int, *, warmup: int, in_control: int, shifted: int, shift: float, seed: int
) -> list[NDArray[np.float64]]:
    """Seeded N(0, 1) streams: ``warmup + in_control`` in-control points, then ``shifted`` at +``shift``."""
    out = []
    for r in range(n_streams):
        rng = np.random.default_rng([seed, 3, r])  # its own seed sequence (evaluation uses 0–2)
        x = rng.normal(0.0, 1.0, warmup + in_control + shifted)
        x[warmup + in_control :] += shift
        out.append(x)
    return out


__all__ = ["EpisodeScore", "score_episodes", "shifted_streams"]
