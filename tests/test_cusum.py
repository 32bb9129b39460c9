"""CUSUM: exact alarms on seeded streams, ARL against Siegmund, state round-trips, contract."""

from __future__ import annotations

import doctest
import json

import numpy as np
import pytest

import model.streams as streams_package
import model.streams.arl as arl_module
import model.streams.baseline as baseline_module
import model.streams.batch as batch_module
import model.streams.cusum as cusum_module
import model.streams.simulate as simulate_module
from model.core.errors import InputError
from model.streams import (
    Alarm,
    Cusum,
    detect,
    detect_with_statistics,
    h_for_arl0,
    run_lengths,
    siegmund_arl,
    simulate_run_lengths,
)
from model.streams.batch import episodes
from model.streams.catalog import STREAM_DETECTORS, make_stream_detector
from model.streams.cusum import EPISODE_CAP


def _alarms(alarms: list[Alarm]) -> list[tuple[int, str, int]]:
    return [(a.index, a.direction, a.start) for a in alarms]


def test_numpy_streams_are_the_ones_the_indices_were_pinned_on() -> None:
    # If a NumPy upgrade changes default_rng's normal stream, this is the one clear failure.
    assert np.random.default_rng(1).normal(size=3).tolist() == pytest.approx(
        [0.345584192064786, 0.8216181435011584, 0.33043707618338714], abs=1e-15
    )


def _episodes(values: list[float], **params: object) -> list[tuple[str, int, str]]:
    """('alarm', index, direction) and ('closed', index, '') events of a fresh detector."""
    det = Cusum(**params)  # type: ignore[arg-type]
    events = []
    for i, v in enumerate(values):
        was_open = det.alarm_open
        alarm = det.update(v)
        if was_open and not det.alarm_open:
            events.append(("closed", i, ""))
        if alarm is not None:
            events.append(("alarm", i, alarm.direction))
    return events


def test_hand_made_stream_one_alarm_per_change_and_the_episode_closes_at_zero() -> None:
    # k = 0.5: each 2.0 adds 1.5 to S+; S+ = 1.5, 3.0, 4.5 > h = 4 at index 12, then 6.0 ... 9.0
    # (no second alarm); each 0.0 takes 0.5 off: S+ is 0 again at index 15 + 18 = 33, the
    # episode closes there, and the next shift is a new change.
    values = [0.0] * 10 + [2.0] * 6 + [0.0] * 20 + [2.0] * 4
    alarms = detect(values, mean=0.0, std=1.0, h=4.0)
    assert _alarms(alarms) == [(12, "up", 10), (38, "up", 36)]
    assert alarms[0].statistic == pytest.approx(4.5)
    assert (alarms[0].mean, alarms[0].std, alarms[0].bound) == (0.0, 1.0, 1.0)
    assert _episodes(values, mean=0.0, std=1.0, h=4.0) == [
        ("alarm", 12, "up"),
        ("closed", 33, ""),
        ("alarm", 38, "up"),
    ]


def test_open_statistic_is_held_at_the_cap_so_a_long_shift_closes_soon_after_it_ends() -> None:
    # 200 values of z = 2 would take S+ to 300 and 600 observations to come back; held at
    # 3h = 12 it is back at 0 after 24 in-control zeros.
    values = [2.0] * 200 + [0.0] * 30
    _, s_hi, _ = detect_with_statistics(values, mean=0.0, std=1.0, h=4.0)
    assert float(np.nanmax(s_hi)) == EPISODE_CAP * 4.0
    assert _episodes(values, mean=0.0, std=1.0, h=4.0) == [("alarm", 2, "up"), ("closed", 223, "")]


def test_the_other_side_crossing_is_a_new_change_and_each_side_closes_on_its_own() -> None:
    values = [0.0] * 5 + [3.0] * 4 + [-3.0] * 8
    # S+ = 2.5, 5.0 > 4 at 6 (up), 7.5, 10.0; then each -3.0 takes 3.5 off S+ (6.5, 3.0, 0 at 11)
    # and adds 2.5 to S- (2.5, 5.0 > 4 at 10: down, while the up episode is still open). The up
    # episode closes at 11, where S+ is back at 0; the down one stays open (S- keeps rising).
    det = Cusum(mean=0.0, std=1.0, h=4.0)
    assert _episodes(values, mean=0.0, std=1.0, h=4.0) == [("alarm", 6, "up"), ("alarm", 10, "down")]
    assert [(a.index, a.direction, closed) for a, closed in episodes(values, mean=0.0, std=1.0, h=4.0)] == [
        (6, "up", 11),
        (10, "down", None),
    ]
    for v in values:
        det.update(v)
    assert (det.open_hi_, det.open_lo_, det.s_hi_) == (False, True, 0.0)


def test_an_episode_closes_when_its_own_side_is_back_at_0_not_when_both_are() -> None:
    # k = 0.5, h = 4. Up: 3.0 x 2 -> S+ = 2.5, 5.0 (alarm at 1). Then -0.6 x 5: S+ = 3.9, 2.8,
    # 1.7, 0.6, 0 (index 6) while S- = 0.1, 0.2, 0.3, 0.4, 0.5 > 0: the up episode closes at 6
    # (version 2.0 waited for both to be 0), and a new rise is a new alarm.
    values = [3.0, 3.0] + [-0.6] * 5 + [3.0] * 2
    events = [(a.index, a.direction, closed) for a, closed in episodes(values, mean=0.0, std=1.0, h=4.0)]
    assert events == [(1, "up", 6), (8, "up", None)]


def test_known_baseline_mean_shift_exact_alarms() -> None:
    rng = np.random.default_rng(1)
    x = np.r_[rng.normal(0.0, 1.0, 200), rng.normal(1.0, 1.0, 100)]
    alarms = detect(x, mean=0.0, std=1.0, arl0=500.0)
    # The plug-in chart of version 1.0 restarted after each alarm and raised 6 here.
    assert _alarms(alarms) == [(203, "up", 200)]
    assert alarms[0].statistic == pytest.approx(5.1565, abs=1e-4)


def test_warmup_baseline_downward_shift_exact_alarms() -> None:
    rng = np.random.default_rng(2)
    x = np.r_[rng.normal(50.0, 5.0, 150), rng.normal(40.0, 5.0, 100)]
    det = Cusum(warmup=100, arl0=1000.0)
    for v in x[:100]:
        assert det.update(float(v)) is None
    # The warm-up seeds the baseline: its mean and (n - 1) standard deviation.
    assert det.baseline() == pytest.approx((float(x[:100].mean()), float(x[:100].std(ddof=1))))
    alarms = [a for v in x[100:] if (a := det.update(float(v))) is not None]
    assert _alarms(alarms) == [(152, "down", 150)]
    # Learnt from the 152 in-control observations before the alarm, then frozen.
    assert det.base_n_ == 152
    assert (alarms[0].mean, alarms[0].std) == pytest.approx(
        (float(x[:152].mean()), float(x[:152].std(ddof=1)))
    )
    assert alarms[0].bound == pytest.approx(alarms[0].mean - 1.0 * alarms[0].std)
    assert det.baseline() == pytest.approx((alarms[0].mean, alarms[0].std))


def test_self_starting_scores_are_standard_normal_after_a_tiny_warmup() -> None:
    # Hawkins: the t mapping makes each standardised observation exactly N(0, 1) whatever the
    # number of observations before it. A plug-in (x - mean) / std after 5 points would have a
    # standard deviation of about 1.3 and put 8 % beyond 2 instead of 2.3 %.
    rng = np.random.default_rng(7)
    scores = []
    for _ in range(4000):
        det = Cusum(warmup=5, h=1e6)
        for v in rng.normal(10.0, 3.0, 5):
            det.update(float(v))
        scores.append(det._score(float(rng.normal(10.0, 3.0))))
    z = np.asarray(scores)
    assert abs(z.mean()) < 0.05
    assert z.std() == pytest.approx(1.0, abs=0.04)
    assert float(np.mean(np.abs(z) > 2.0)) == pytest.approx(0.0455, abs=0.01)


def test_one_sided_up_ignores_a_drop() -> None:
    x = [0.0] * 5 + [-3.0] * 20
    assert detect(x, mean=0.0, std=1.0, h=4.0, direction="up") == []
    assert _alarms(detect(x, mean=0.0, std=1.0, h=4.0, direction="down"))[0] == (6, "down", 5)


@pytest.mark.parametrize(
    ("k", "arl0"),
    [(0.5, 200.0), (0.5, 500.0), (0.25, 300.0), (1.0, 400.0)],
)
def test_simulated_arl0_within_15_percent_of_target(k: float, arl0: float) -> None:
    h = h_for_arl0(arl0, k)
    assert siegmund_arl(k, h) == pytest.approx(arl0, rel=1e-6)
    rl = simulate_run_lengths(k, h, n_runs=3000, rng=np.random.default_rng(11), max_length=50 * int(arl0))
    assert rl.max() < 50 * arl0  # nothing censored
    assert abs(rl.mean() / arl0 - 1.0) < 0.15


@pytest.mark.parametrize(("k", "h", "shift"), [(0.5, 5.0, 1.0), (0.5, 4.0, 2.0), (0.25, 8.0, 0.5)])
def test_simulated_arl1_within_15_percent_of_siegmund(k: float, h: float, shift: float) -> None:
    rl = simulate_run_lengths(k, h, shift=shift, n_runs=3000, rng=np.random.default_rng(5))
    assert abs(rl.mean() / siegmund_arl(k, h, shift) - 1.0) < 0.15


def test_object_and_vectorised_recursions_agree() -> None:
    z = np.random.default_rng(3).normal(0.3, 1.0, size=(40, 400))
    vec = run_lengths(z, 0.5, 4.0)
    for row, expected in zip(z, vec, strict=True):
        alarms = detect(row, mean=0.0, std=1.0, h=4.0)
        assert (alarms[0].index + 1 if alarms else 0) == expected


def test_h_for_arl0_one_sided_versus_two_sided() -> None:
    # One side alone alarms half as often, so it needs a lower h for the same ARL0.
    assert h_for_arl0(500.0, 0.5, direction="up") < h_for_arl0(500.0, 0.5)
    assert h_for_arl0(1000.0, 0.5, direction="up") == pytest.approx(h_for_arl0(500.0, 0.5))
    # Two-sided ARL0 is half the one-sided one for a symmetric scheme.
    h2 = h_for_arl0(500.0, 0.5)
    assert siegmund_arl(0.5, h2, direction="up") == pytest.approx(1000.0, rel=1e-6)


@pytest.mark.parametrize("cut", [0, 40, 99, 100, 214, 215, 216, 260])
def test_state_json_round_trip_mid_stream_continues_identically(cut: int) -> None:
    rng = np.random.default_rng(4)
    x = np.r_[rng.normal(3.0, 0.5, 200), rng.normal(3.6, 0.5, 100)].tolist()
    params = {"shift": 1.0, "arl0": 300.0, "warmup": 100, "ewma": 0.05}
    whole = Cusum(**params)
    expected = [whole.update(v) for v in x]
    first = Cusum(**params)
    got = [first.update(v) for v in x[:cut]]
    state = json.loads(json.dumps(first.get_state()))
    second = Cusum.from_state(state)
    got += [second.update(v) for v in x[cut:]]
    assert got == expected
    assert second.get_state() == whole.get_state()
    assert any(a is not None for a in expected)


# A state saved by version 1.0 (plug-in median / MAD baseline, restart after each alarm) on
# default_rng(1) N(0, 1) x 200 then N(1, 1), after 210 observations (alarm at 201, open).
V1_STATE = {
    "detector": "cusum",
    "version": "1.0",
    "params": {"shift": 1.0, "arl0": 500.0, "h": None, "mean": None, "std": None, "warmup": 100,
               "ewma": None, "direction": "both", "min_std": 1e-09},
    "n": 210, "warmup_values": [], "mu": 0.030711172649928446, "sigma": 0.7925638765688112,
    "h": 5.062962504221861, "s_hi": 3.814501617761368, "s_lo": 0.0, "zero_hi": 202, "zero_lo": 209,
    "alarm_open": True, "alarms": 1,
}  # fmt: skip


def test_a_version_1_state_carries_over_with_its_open_alarm() -> None:
    det = Cusum.from_state(json.loads(json.dumps(V1_STATE)))
    assert det.n_ == 210 and det.alarm_open and det.alarms_ == 1
    assert det.baseline() == pytest.approx((0.030711172649928446, 0.7925638765688112))
    rng = np.random.default_rng(1)
    x = np.r_[rng.normal(0.0, 1.0, 200), rng.normal(1.0, 1.0, 100)]
    # The shift goes on: the open episode holds, no second alarm (version 1.0 raised 6 more).
    assert [det.update(float(v)) for v in x[210:]] == [None] * 90
    assert det.get_state()["version"] == "2.1"
    with pytest.raises(InputError, match="version 1.0 state"):
        Cusum.from_state({k: v for k, v in V1_STATE.items() if k != "s_hi"})


def test_rebaseline_closes_the_episode_and_learns_the_new_level() -> None:
    rng = np.random.default_rng(3)
    x = np.r_[rng.normal(0.0, 1.0, 300), rng.normal(2.0, 1.0, 300)]
    det = Cusum(warmup=100)
    alarms = [(i, a) for i, v in enumerate(x[:400]) if (a := det.update(float(v))) is not None]
    assert [(i, a.direction, a.start) for i, a in alarms] == [(307, "up", 300)]
    assert det.alarm_open
    det.rebaseline(values=x[300:400])
    assert not det.alarm_open and (det.s_hi_, det.s_lo_) == (0.0, 0.0)
    assert det.baseline() == pytest.approx((float(x[300:400].mean()), float(x[300:400].std(ddof=1))))
    later = [a for v in x[400:] if (a := det.update(float(v))) is not None]
    # One false alarm in the 200 points after (ARL0 500), measured against the new level.
    assert _alarms(later) == [(564, "down", 562)]
    assert later[0].mean == pytest.approx(float(x[300:564].mean()))
    # Learnt: the 100 given values, the 164 in-control ones up to that alarm and the 26 after its
    # episode closed (at 573; the closing observation is not learnt).
    assert det.base_n_ == 290


def test_set_state_refuses_other_params_and_other_detectors() -> None:
    state = Cusum(shift=1.0).get_state()
    with pytest.raises(InputError, match="params"):
        Cusum(shift=2.0).set_state(state)
    with pytest.raises(InputError, match="detector"):
        Cusum().set_state({**state, "detector": "page_hinkley"})
    broken = dict(state)
    del broken["s_hi"]
    with pytest.raises(InputError, match="s_hi"):
        Cusum(shift=1.0).set_state(broken)
    with pytest.raises(InputError, match="wrong type"):
        Cusum(shift=1.0).set_state({**state, "n": "many"})


def test_ewma_baseline_frozen_while_alarm_open_then_rebaselined() -> None:
    det = Cusum(mean=0.0, std=1.0, h=4.0, ewma=0.1)
    for v in [0.2, -0.2, 0.1]:
        assert det.update(v) is None
    mu3 = ((0.0 + 0.1 * 0.2) * 0.9 + 0.1 * -0.2) * 0.9 + 0.1 * 0.1
    assert det.mu_ == pytest.approx(mu3)
    alarms = [det.update(3.0) for _ in range(6)]
    # The EWMA moved towards 3 on index 3, then the alarm (index 4) froze it: one alarm.
    assert [a.index for a in alarms if a is not None] == [4]
    frozen = det.mu_
    assert frozen == pytest.approx(0.1 * 3.0 + 0.9 * mu3)
    assert alarms[1] is not None and alarms[1].mean == pytest.approx(frozen)
    assert det.alarm_open
    det.update(3.0)
    assert det.mu_ == frozen
    det.rebaseline(values=[3.0] * 20)
    assert not det.alarm_open
    assert det.mu_ == 3.0
    assert det.baseline() == (3.0, 1.0)  # constant values: sigma kept
    assert [det.update(3.0) for _ in range(5)] == [None] * 5


def test_alarm_start_after_rebaseline_counts_from_the_rebaseline() -> None:
    det = Cusum(mean=0.0, std=1.0, h=4.0)
    for _ in range(3):
        det.update(0.0)
    det.rebaseline(mean=1.0, std=1.0)
    alarms = [a for _ in range(5) if (a := det.update(3.0)) is not None]
    assert _alarms(alarms) == [(5, "up", 3)]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"shift": 0.0}, "shift must be > 0"),
        ({"shift": float("nan")}, "shift must be a finite number"),
        ({"arl0": 1.0}, "arl0 must be > 1"),
        ({"h": -1.0}, "h must be > 0"),
        ({"std": 0.0, "mean": 1.0}, "std must be > 0"),
        ({"warmup": 1}, "warmup must be an integer >= 2"),
        ({"ewma": 1.5}, r"ewma must be in \(0, 1\]"),
        ({"direction": "sideways"}, "direction must be"),
    ],
)
def test_bad_params_are_clear_errors(params: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        Cusum(**params)  # type: ignore[arg-type]


def test_non_finite_observation_is_a_clear_error() -> None:
    det = Cusum(mean=0.0, std=1.0)
    det.update(1.0)
    with pytest.raises(InputError, match="observation 1 must be a finite number; got nan"):
        det.update(float("nan"))


def test_registered_contract() -> None:
    assert STREAM_DETECTORS["cusum"] is Cusum
    det = make_stream_detector("cusum", shift=0.5, arl0=200.0)
    assert det.get_params()["shift"] == 0.5 and det.get_params()["h"] is None
    fresh = det.get_state()
    for v in range(120):
        det.update(float(v % 7))
    det.reset()
    det.reset()
    assert det.get_state() == fresh
    assert Cusum().get_params() == Cusum().get_params()


@pytest.mark.parametrize("module", [arl_module, baseline_module, batch_module, cusum_module, streams_package,
                                    simulate_module])
def test_docstring_examples(module: object) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)  # type: ignore[arg-type]
    assert result.attempted > 0 and result.failed == 0


# ------------------------------------------------------------------ evaluation helpers (bench, notebook)
from model.streams.simulate import simulate_agent_metrics  # noqa: E402
from model.training.streams.evaluation import (  # noqa: E402
    SCENARIOS,
    CusumPeer,
    PageHinkleyPeer,
    RupturesWindowPeer,
    Scenario,
    calibrate,
    detection_delays,
    first_alarm,
    in_control_run_lengths,
    theory_vs_measured,
)


def test_scenarios_apply_exactly() -> None:
    noise = np.zeros(4)
    by_name = {s.name: s for s in SCENARIOS}
    assert by_name["mean +1σ"].apply(noise).tolist() == [1.0] * 4
    assert by_name["variance ×2"].apply(np.ones(2)).tolist() == [2.0, 2.0]
    assert by_name["drift +0.01σ/step"].apply(noise).tolist() == pytest.approx([0.01, 0.02, 0.03, 0.04])
    with pytest.raises(InputError, match="unknown scenario kind"):
        Scenario("x", "wobble", 1.0).apply(noise)


def test_cusum_peer_matches_the_detector() -> None:
    x = np.r_[np.zeros(100), np.full(10, 3.0)]
    # A constant warm-up: MAD 0, std 0, sigma floored at min_std, so the first 3.0 alarms.
    assert first_alarm(CusumPeer(arl0=500.0, shift=1.0, warmup=100), x) == 100


def test_run_lengths_and_delays_are_exact_for_a_seed() -> None:
    def make() -> CusumPeer:
        return CusumPeer(arl0=200.0, shift=1.0, warmup=100)

    rl = in_control_run_lengths(make, n_runs=5, warmup=100, max_length=1600, seed=3)
    again = in_control_run_lengths(make, n_runs=5, warmup=100, max_length=1600, seed=3)
    assert rl.tolist() == again.tolist()
    assert rl.min() >= 1 and rl.max() <= 1600
    stats = detection_delays(make, SCENARIOS[2], n_runs=10, warmup=100, pre=50, horizon=200, seed=3)
    assert stats.missed == 0
    assert len(stats.delays) + stats.false_alarms == 10
    assert all(1 <= d <= 10 for d in stats.delays)  # a 2σ shift: ARL1 ≈ 3.9


def test_calibration_matches_the_target_arl0() -> None:
    target = 150.0
    threshold, measured = calibrate(
        lambda t: PageHinkleyPeer(threshold=t, delta=0.5),
        target,
        bounds=(0.5, 100.0),
        n_runs=40,
        warmup=50,
        seed=1,
        iterations=12,
    )
    assert abs(measured / target - 1.0) < 0.1
    assert 1.0 < threshold < 20.0


def test_ruptures_window_peer_scores_each_position_once() -> None:
    peer = RupturesWindowPeer(threshold=50.0, width=10, stride=5)
    x = np.r_[np.zeros(30), np.full(30, 5.0)]
    # Evaluations at indices 34, 39, ...: at 34 positions 25..29 are scored (best gain 40 at 29,
    # window [24, 34)); at 39 positions 30..34, and the step at 30 gains 10/4 * 25 = 62.5 > 50.
    assert first_alarm(peer, x) == 39
    assert first_alarm(RupturesWindowPeer(threshold=35.0, width=10, stride=5), x) == 34


def test_theory_vs_measured_small() -> None:
    rows = theory_vs_measured(arl0=200.0, shifts=(1.0, 2.0), n_runs=400, seed=2)
    assert [r.shift for r in rows] == [1.0, 2.0]
    for r in rows:
        assert abs(r.ratio - 1.0) < 0.15


def test_simulated_agent_metrics_are_seeded_and_degrade() -> None:
    a = simulate_agent_metrics(500, change_at=300, rng=np.random.default_rng(5))
    b = simulate_agent_metrics(500, change_at=300, rng=np.random.default_rng(5))
    assert a["llm_latency_ms"].tolist() == b["llm_latency_ms"].tolist()
    lat = np.log(a["llm_latency_ms"])
    assert lat[300:].mean() - lat[:300].mean() == pytest.approx(np.log(1.3), abs=0.06)
    assert a["quality"][:300].mean() - a["quality"][350:].mean() == pytest.approx(0.03, abs=0.01)
    with pytest.raises(InputError, match="change_at"):
        simulate_agent_metrics(10, change_at=10, rng=np.random.default_rng(0))
