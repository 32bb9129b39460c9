"""``triage evaluate --learning-curve`` end to end on a small sample of two real sets: the report's
files, its structure, the leave-one-family-out choice, and its Done-when arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from model.training.agentmodel.learning_report import done_when, mean_interval, render_markdown

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

PARAMS = """
learning_curve:
  sets: [tau_airline, agentprocessbench, swe]
  ks: [25, all]
  fractions: [0.5, 1.0]
  prefix_ks: [all]
  folds: 3
  draws: 1
  n_boot: 50
  zero_shot: false
  model: {buckets: 4096}
  candidates: [{}, {c: 1.0}]
  select_k: 25
  select_draws: 1
  sections: false
"""


@pytest.mark.slow
def test_learning_curve_command_writes_the_report(tmp_path: Path) -> None:
    from serve.cli.main import app

    (tmp_path / "params.yaml").write_text(PARAMS, encoding="utf-8")
    r = CliRunner().invoke(app, ["evaluate", "--learning-curve", "--params", str(tmp_path / "params.yaml"),
                                 "--reports", str(tmp_path / "reports"), "--limit", "45"])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "reports" / "learning.json").read_text(encoding="utf-8"))
    assert (tmp_path / "reports" / "learning-figures" / "learning_curve.png").stat().st_size > 10_000
    assert set(rep["sets"]) == {"tau_airline", "agentprocessbench", "swe"}
    for s, d in rep["sets"].items():
        others = [o for o in rep["sets"] if o != s]
        sel = [np.mean([rep["sets"][o]["config"]["selection_auroc"][i] for o in others]) for i in range(2)]
        assert d["config"]["candidate"] == int(np.argmax(sel))  # chosen on the other sets only
        r_all = d["results"]["K=all|f=1"]
        assert {"agent", "tfidf", "length", "agent_minus_tfidf", "agent_minus_length"} <= set(r_all)
        assert "K=all|f=0.5" in d["results"] and "K=25|f=0.5" not in d["results"]
    md = (tmp_path / "reports" / "learning.md").read_text(encoding="utf-8")
    assert "leave one family out" in md.lower() and "| tau_airline |" in md
    # the report names the candidate best over every set and says whether `served` still names it
    means = [np.mean([d["config"]["selection_auroc"][i] for d in rep["sets"].values()]) for i in range(2)]
    assert f"Best on the mean over every set: candidate {int(np.argmax(means))}" in md
    assert rep["protocol"]["served"] == 0


def test_retrain_fits_the_served_candidate_and_refuses_a_bad_index(tmp_path: Path) -> None:
    from model.core.errors import InputError
    from model.training.agentmodel.learning import LearningConfig
    from serve.services.retrain import model_config

    p = tmp_path / "params.yaml"
    p.write_text(PARAMS + "  served: 1\n", encoding="utf-8")
    cfg, prior = model_config(p)
    assert cfg.c == 1.0 and cfg.buckets == 4096 and cfg.internal_folds == 5 and prior is False
    p.write_text(PARAMS.replace("candidates: [{}, {c: 1.0}]", "candidates: [{}, {prior: true, last_turn: true}]")
                 + "  served: 1\n", encoding="utf-8")
    cfg, prior = model_config(p)
    assert cfg.last_turn is True and prior is True
    with pytest.raises(InputError, match="learning_curve.served"):
        LearningConfig.from_dict({"candidates": [{}], "served": 2})
    p.write_text("runscore: {}\n", encoding="utf-8")  # a file without the section: the defaults, no prior
    cfg, prior = model_config(p)
    assert cfg.combine == "joint" and prior is False
    with pytest.raises(InputError, match="missing.yaml does not exist"):  # no file: an error, not the defaults
        model_config(tmp_path / "missing.yaml")


def _res(agent: float, tfidf: float, length: float, reps: list[float]) -> dict:
    def m(a: float) -> dict:
        return {"auroc": a, "interval": [a - 0.1, a + 0.1], "auprc": a}

    return {"folds": 5, "agent": m(agent), "tfidf": m(tfidf), "length": m(length),
            "agent_minus_tfidf": {"diff": agent - tfidf, "interval": [0, 0], "replicates": reps},
            "agent_minus_length": {"diff": agent - length, "interval": [0, 0], "replicates": reps}}


def test_done_when_reads_k100_else_all_and_the_better_cheap_learner() -> None:
    reps = {"a": {"K=100|f=1": _res(0.80, 0.75, 0.70, [0.04, 0.06]), "K=50|f=1": _res(0.7, 0.6, 0.65, [0.1])},
            "b": {"K=all|f=1": _res(0.60, 0.55, 0.62, [-0.03, -0.01])}}
    per_set = {"a": {}, "b": {}}
    dw = done_when(per_set, reps)
    assert dw["per_set"]["a"]["K"] == "100" and dw["per_set"]["a"]["better_cheap"] == "tfidf"
    assert dw["per_set"]["b"]["K"] == "all" and dw["per_set"]["b"]["better_cheap"] == "length"
    assert dw["per_set"]["b"]["not_below_minus_0.01"] is False
    assert dw["mean_diff_vs_better"]["diff"] == pytest.approx((0.05 - 0.02) / 2)
    assert dw["k50_ahead_of_both_on"] == 1 and dw["every_set_within_0.01"] is False
    assert callable(render_markdown)


def test_done_when_pairs_the_agent_model_with_the_reference_on_the_mean() -> None:
    a, b = _res(0.80, 0.75, 0.70, [0.04, 0.06]), _res(0.60, 0.55, 0.62, [-0.03, -0.01])
    a["reference"], b["reference"] = {"auroc": 0.78}, {"auroc": 0.56}
    a["agent_minus_reference"] = {"diff": 0.02, "interval": [0, 0], "replicates": [0.01, 0.03, 0.02]}
    b["agent_minus_reference"] = {"diff": 0.04, "interval": [0, 0], "replicates": [0.05, 0.03, 0.04]}
    dw = done_when({"a": {}, "b": {}}, {"a": {"K=100|f=1": a}, "b": {"K=all|f=1": b}})
    m = dw["mean_vs_reference"]
    assert m["diff"] == pytest.approx(0.03) and m["reference"] == pytest.approx(0.67)
    assert m["agent"] == pytest.approx(0.70) and 0.02 <= m["interval"][0] <= m["interval"][1] <= 0.035
    assert "mean_vs_reference" not in done_when({"a": {}}, {"a": {"K=100|f=1": _res(0.8, 0.7, 0.7, [0.1])}})


def test_mean_interval_averages_the_sets_replicates_draw_by_draw() -> None:
    # replicate i of every set is one bootstrap draw: the mean is taken draw by draw (to the shortest), not
    # pooled; the two sets' replicates cancel, so the interval is a point
    lo, hi = mean_interval([np.array([0.1, 0.3, 0.2, 5.0]), [0.3, 0.1, 0.2]])
    assert lo == pytest.approx(0.2) and hi == pytest.approx(0.2)
    lo, hi = mean_interval([np.linspace(0, 1, 401)])
    assert lo == pytest.approx(0.025) and hi == pytest.approx(0.975)


@pytest.mark.slow
def test_the_early_warning_model_is_chosen_on_prefixes_and_gives_the_prefix_rows(tmp_path: Path) -> None:
    from serve.cli.main import app

    params = PARAMS.replace("candidates: [{}, {c: 1.0}]",
                            "candidates: [{prefix_fractions: [1.0]}, {shape_weight: 0.0}]\n  reference: 0")
    params = params.replace("fractions: [0.5, 1.0]", "fractions: [0.25, 0.5, 1.0]")
    (tmp_path / "params.yaml").write_text(params, encoding="utf-8")
    r = CliRunner().invoke(app, ["evaluate", "--learning-curve", "--params", str(tmp_path / "params.yaml"),
                                 "--reports", str(tmp_path / "reports"), "--limit", "45"])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "reports" / "learning.json").read_text(encoding="utf-8"))
    for s, d in rep["sets"].items():
        others = [o for o in rep["sets"] if o != s]
        sel = [np.mean([rep["sets"][o]["config"]["prefix_selection_auroc"][i] for o in others]) for i in range(2)]
        assert d["config"]["prefix_candidate"] == int(np.argmax(sel))
        assert "agent_minus_reference" in d["results"]["K=all|f=1"]
    md = (tmp_path / "reports" / "learning.md").read_text(encoding="utf-8")
    assert "early-warning model" in md and "Against the model served before (candidate 0" in md
