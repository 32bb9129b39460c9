"""The evaluation metrics (model/core/metrics.py) against scikit-learn on seeded random data, ties
included, and the bootstrap helpers on small cases whose answer is known."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

import model.core.metrics as metrics_module
from model.core.errors import InputError
from model.core.metrics import (
    AurocUnit,
    auprc,
    auroc,
    ece,
    group_bootstrap,
    group_bootstrap_interval,
    group_bootstrap_weights,
    logistic,
    logit,
    percentile_interval,
    reliability_bins,
    sigmoid,
)


def test_metrics_match_scikit_learn() -> None:
    m = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 300)
    s = np.round(rng.random(300) + 0.3 * y, 1)  # ties on purpose
    assert auroc(y, s) == pytest.approx(m.roc_auc_score(y, s), abs=1e-12)
    assert auprc(y, s) == pytest.approx(m.average_precision_score(y, s), abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("levels", [2, 5, 1000])  # few distinct scores: many ties
def test_auroc_matches_roc_auc_score(seed: int, levels: int) -> None:
    m = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 200))
    y = rng.integers(0, 2, n)
    y[:2] = [0, 1]
    s = rng.integers(0, levels, n) / levels + 0.1 * y * rng.random(n)
    assert auroc(y, s) == pytest.approx(m.roc_auc_score(y, s), abs=1e-12)
    assert auroc(y.astype(bool), s) == auroc(y.astype(float), s) == auroc(y, s)  # label types
    assert auprc(y, s) == pytest.approx(m.average_precision_score(y, s), abs=1e-12)


def test_auroc_is_nan_with_one_class() -> None:
    assert math.isnan(auroc(np.ones(4), np.arange(4.0)))
    assert math.isnan(auroc(np.zeros(4), np.arange(4.0)))
    assert math.isnan(auprc(np.zeros(4), np.arange(4.0)))
    assert auroc(np.array([0, 1]), np.array([0.3, 0.3])) == 0.5


def test_ece_and_reliability_match_calibration_curve() -> None:
    calibration = pytest.importorskip("sklearn.calibration")
    rng = np.random.default_rng(3)
    p = rng.random(500)  # scikit-learn puts a value on an inner edge in the lower bin, we in the upper
    p[:3] = [0.0, 1.0, 0.55]
    y = (rng.random(500) < p ** 1.5).astype(float)
    prob_true, prob_pred = calibration.calibration_curve(y, p, n_bins=10, strategy="uniform")
    rows = reliability_bins(y, p, bins=10)
    np.testing.assert_allclose([r["failed_rate"] for r in rows], prob_true, atol=5e-5)
    np.testing.assert_allclose([r["mean_p"] for r in rows], prob_pred, atol=5e-5)
    assert sum(r["n"] for r in rows) == 500
    weights = np.array([r["n"] for r in rows]) / 500
    assert ece(y, p, bins=10) == pytest.approx(float(np.sum(weights * np.abs(prob_true - prob_pred))), abs=1e-12)
    # multi-label arrays are flattened, bins default to 10
    assert ece(y.reshape(50, 10), p.reshape(50, 10)) == ece(y, p, bins=10)
    assert ece(np.zeros(0), np.zeros(0)) == 0.0
    # an inner edge opens its upper bin; 1.0 closes the last one
    assert [r["bin"] for r in reliability_bins(np.array([0, 1]), np.array([0.1, 1.0]))] == [[0.1, 0.2], [0.9, 1.0]]


def test_sigmoid_logistic_logit() -> None:
    z = np.array([-1000.0, -3.0, 0.0, 2.0, 1000.0])
    np.testing.assert_allclose(sigmoid(z), 1 / (1 + np.exp(-np.clip(z, -40, 40))))
    assert [logistic(float(v)) for v in z[1:4]] == pytest.approx(list(sigmoid(z[1:4])), abs=1e-15)
    assert logistic(-1000.0) == 0.0 and logistic(1000.0) == 1.0
    assert logistic(logit(0.3)) == pytest.approx(0.3)
    assert logit(0.0) == pytest.approx(math.log(1e-6 / (1 - 1e-6)))


def test_group_bootstrap_draws_whole_groups() -> None:
    groups = ["a", "a", "b", "c", "c", "c"]
    boot = group_bootstrap(groups, np.random.default_rng(0), n_boot=50)
    assert boot.groups == ("a", "b", "c") and boot.counts.shape == (50, 3)
    assert (boot.counts.sum(1) == 3).all()  # as many draws as groups
    resamples = boot.resamples(groups)
    members = {"a": {0, 1}, "b": {2}, "c": {3, 4, 5}}
    for b, counts in zip(resamples, boot.counts, strict=True):
        assert set(b.tolist()) <= set(range(6))
        for j, (g, rows) in enumerate(members.items()):  # a group is in whole, as many times as it was drawn
            assert {int((b == i).sum()) for i in rows} == {int(counts[j])}, g


def test_group_bootstrap_draws_the_stream_of_one_replicate_at_a_time() -> None:
    # one (n_boot, groups) draw consumes the generator as n_boot draws of one replicate each did
    # (the resamplers this one replaced): a caller's later draws from a shared generator are unchanged
    rng, ref = np.random.default_rng(7), np.random.default_rng(7)
    boot = group_bootstrap(["x", "y", "z", "x"], rng, n_boot=20)
    picks = [ref.integers(0, 3, 3) for _ in range(20)]
    np.testing.assert_array_equal(boot.counts, [np.bincount(p, minlength=3) for p in picks])
    assert rng.random() == ref.random()
    # a seed makes its own generator
    np.testing.assert_array_equal(group_bootstrap(["x", "y"], 3, 5).counts,
                                  group_bootstrap(["x", "y"], np.random.default_rng(3), 5).counts)


def test_group_bootstrap_means_weight_rows_by_their_group() -> None:
    groups, values = ["a", "a", "b"], np.array([1.0, 3.0, 10.0])
    boot = group_bootstrap(groups, 0, n_boot=200)
    np.testing.assert_allclose(boot.means(values, groups), (boot.counts[:, 0] * 4 + boot.counts[:, 1] * 10)
                               / (boot.counts[:, 0] * 2 + boot.counts[:, 1]))
    np.testing.assert_allclose(boot.means(values, groups), [values[r].mean() for r in boot.resamples(groups)])
    with pytest.raises(InputError, match="'q' is not among the 2 groups"):
        boot.weights(["a", "q"])
    with pytest.raises(InputError, match="at least one group"):
        group_bootstrap([], 0)


def test_percentile_interval() -> None:
    assert percentile_interval([float("nan")]) != percentile_interval([float("nan")])  # (nan, nan)
    lo, hi = percentile_interval(np.r_[np.arange(101.0), np.nan])
    assert (lo, hi) == pytest.approx((2.5, 97.5))
    assert percentile_interval(np.arange(101.0), level=0.5) == pytest.approx((25.0, 75.0))


def test_group_bootstrap_is_paired_and_brackets_the_point() -> None:
    rng = np.random.default_rng(4)
    groups = [f"t{i // 3}" for i in range(60)]
    y = (rng.random(60) < 0.4).astype(float)
    a, b = y + rng.normal(0, 0.8, 60), y + rng.normal(0, 1.5, 60)
    lo, hi = group_bootstrap_interval(y, a, groups, seed=1, n_boot=500)
    assert lo <= auroc(y, a) <= hi
    unit = AurocUnit.make(y, {"a": a, "b": b}, groups)
    assert unit.point() == pytest.approx({"a": auroc(y, a), "b": auroc(y, b)}, abs=1e-12)
    (w,) = group_bootstrap_weights([unit], seed=1, n_boot=500)
    assert w.shape == (500, 20) and (w.sum(1) == 20).all()
    reps = unit.replicates(w)
    assert percentile_interval(reps["a"]) == pytest.approx((lo, hi))
    # the paired interval: the difference on the very same replicates
    lo_d, hi_d = group_bootstrap_interval(y, a, groups, seed=1, n_boot=500, baseline=b)
    assert percentile_interval(reps["a"] - reps["b"]) == pytest.approx((lo_d, hi_d))
    assert lo_d <= auroc(y, a) - auroc(y, b) <= hi_d
    # a replicate drawing every group once is the point estimate
    np.testing.assert_allclose(unit.replicates(np.ones((1, 20)))["a"], [auroc(y, a)])


def test_doctests() -> None:
    assert doctest.testmod(metrics_module).failed == 0
