"""Offline change points (ruptures): planted change points found within ±2 samples, confirm()."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import model.streams.changepoints as changepoints_module
from model.core.errors import InputError
from model.streams import Cusum, confirm, detect, detect_changepoints, noise_sigma
from model.streams.changepoints import bic_penalty

PLANTED = [153, 318, 482]
MEANS = [0.0, 3.0, -1.0, 2.0]


def planted_signal(seed: int, sigma: float = 1.0, n: int = 600) -> np.ndarray:
    """Piecewise-constant mean plus Gaussian noise (ruptures' pw_constant, seeded here)."""
    rng = np.random.default_rng(seed)
    bounds = [0, *PLANTED, n]
    level = np.concatenate([np.full(b - a, m) for a, b, m in zip(bounds, bounds[1:], MEANS, strict=False)])
    return level * sigma + rng.normal(0.0, sigma, n) + 100.0


@pytest.mark.parametrize(
    ("method", "exact"), [("binseg", False), ("window", False), ("pelt", False), ("pelt", True)]
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_planted_change_points_within_two_samples(method: str, exact: bool, seed: int) -> None:
    x = planted_signal(seed, sigma=2.5)
    result = detect_changepoints(x, method=method, exact=exact)  # type: ignore[arg-type]
    assert len(result.changepoints) == len(PLANTED)
    for found, planted in zip(result.changepoints, PLANTED, strict=True):
        assert abs(found - planted) <= 2
    assert result.jump == (5 if method == "pelt" and not exact else 1)
    bounds = [0, *result.changepoints, len(x)]
    assert [(s.start, s.end) for s in result.segments] == list(zip(bounds, bounds[1:], strict=False))
    for s in result.segments:
        assert s.mean == pytest.approx(float(x[s.start : s.end].mean()))


def test_binseg_exact_indices_on_one_seeded_signal() -> None:
    result = detect_changepoints(planted_signal(0, sigma=2.5))
    assert result.changepoints == [153, 318, 481]  # the noise moved the last one by 1


@pytest.mark.parametrize("method", ["binseg", "window", "pelt"])
def test_pure_noise_gives_no_change_points(method: str) -> None:
    for seed in range(5):
        x = np.random.default_rng(100 + seed).normal(5.0, 3.0, 1000)
        assert detect_changepoints(x, method=method).changepoints == []  # type: ignore[arg-type]


def test_bounded_window_keeps_whole_input_indices() -> None:
    x = np.r_[planted_signal(1), planted_signal(2)]  # 1,200 points; changes at 153.. and 600+..
    result = detect_changepoints(x, max_points=500)
    assert result.offset == 700
    assert result.segments[0].start == 700 and result.segments[-1].end == 1200
    assert all(700 <= cp < 1200 for cp in result.changepoints)
    assert [cp for cp in result.changepoints if abs(cp - 1082) <= 2]  # 600 + 482


def test_noise_sigma_ignores_level_shifts_and_penalty_scales_with_it() -> None:
    x = planted_signal(3, sigma=2.0)
    assert noise_sigma(x) == pytest.approx(2.0, rel=0.1)
    assert bic_penalty(x, c=3.0) == pytest.approx(3.0 * noise_sigma(x) ** 2 * np.log(600))


def test_constant_and_short_inputs() -> None:
    assert detect_changepoints([4.0] * 50).changepoints == []
    short = detect_changepoints([1.0, 2.0, 9.0])
    assert short.changepoints == [] and short.segments[0].mean == pytest.approx(4.0)
    clean_step = detect_changepoints([0.0] * 30 + [5.0] * 30)
    assert clean_step.changepoints == [30]


def test_bad_inputs_are_clear_errors() -> None:
    with pytest.raises(InputError, match=r"values\[2\] must be a finite number"):
        detect_changepoints([1.0, 2.0, float("inf"), 3.0])
    with pytest.raises(InputError, match="exact applies to pelt only"):
        detect_changepoints([1.0, 2.0], method="binseg", exact=True)
    with pytest.raises(InputError, match="method must be one of"):
        detect_changepoints([1.0, 2.0], method="rbf")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="one-dimensional"):
        detect_changepoints([[1.0, 2.0]])


def _first_alarm(seed: int, shift: float = 1.5) -> tuple[np.ndarray, object]:
    rng = np.random.default_rng(seed)
    x = np.r_[rng.normal(0, 1, 200), rng.normal(shift, 1, 40)]
    return x, detect(x, mean=0.0, std=1.0, arl0=500.0)[0]


def test_confirm_dates_the_start_and_rebaselines() -> None:
    x, alarm = _first_alarm(3)
    assert (alarm.index, alarm.start) == (202, 197)  # type: ignore[attr-defined]
    det = Cusum(mean=0.0, std=1.0, arl0=500.0)
    for v in x[:203]:
        det.update(float(v))
    assert det.alarm_open
    result = confirm(alarm, x, detector=det)  # type: ignore[arg-type]
    assert result.confirmed and result.start == 200 and result.rebaselined
    assert result.after_mean is not None and result.before_mean is not None
    assert result.after_mean - result.before_mean == pytest.approx(1.22, abs=0.01)
    assert not det.alarm_open
    # The new level's mean and standard deviation become the (learnt) baseline.
    assert det.baseline() == pytest.approx((float(np.mean(x[200:])), float(np.std(x[200:], ddof=1))))


def test_confirm_rejects_a_false_alarm() -> None:
    x, alarm = _first_alarm(0)
    assert (alarm.index, alarm.start) == (49, 41)  # type: ignore[attr-defined]
    result = confirm(alarm, x)  # type: ignore[arg-type]
    assert not result.confirmed and result.start is None
    assert result.changepoints == [203, 234]
    assert "no upward change point in [32, 49]" in result.reason


def test_confirm_needs_history_reaching_the_alarm() -> None:
    x, alarm = _first_alarm(3)
    with pytest.raises(InputError, match="the alarm is at 202"):
        confirm(alarm, x[:100])  # type: ignore[arg-type]
    # With an offset, history[i] is stream index offset + i.
    assert confirm(alarm, x[100:], offset=100).start == 200  # type: ignore[arg-type]


def test_docstring_examples() -> None:
    result = doctest.testmod(changepoints_module)
    assert result.attempted > 0 and result.failed == 0


def test_episode_scoring() -> None:
    """model/training/streams/episodes.py: its docstring example, and the streams shift where told."""
    import model.training.streams.episodes as episodes_module

    result = doctest.testmod(episodes_module)
    assert result.attempted > 0 and result.failed == 0
    streams = episodes_module.shifted_streams(3, warmup=5, in_control=10, shifted=4, shift=100.0, seed=0)
    assert [len(x) for x in streams] == [19, 19, 19]
    assert all((x[:15] < 50).all() and (x[15:] > 50).all() for x in streams)
