"""The agent model (model/scoring/agentmodel): fit, score, prefix state, persistence, grouped CV, groups.

Data: seeded generated runs of one agent with a known signal — a failed run's tool results say
"quota exceeded" on a random call and the agent apologises; a successful run's don't. Tasks repeat
(three trials each), so folds must group them.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from model.core.errors import InputError, NotFittedError
from model.core.metrics import auroc
from model.core.schema import Step, StepKind, StepStatus, Trace
from model.scoring.agentmodel.features import (
    SHAPE_FEATURES,
    FeatureCache,
    RunCounts,
    bucket,
    last_tokens,
    prefix_lengths,
)
from model.scoring.agentmodel.logistic import fit_logistic
from model.scoring.agentmodel.model import AgentModel, AgentModelConfig
from model.training.agentmodel.cv import cross_validate, group_runs

TOOLS = ("search_flights", "get_booking", "update_booking", "send_email")
WORDS = ["please", "check", "my", "booking", "flight", "seat", "change", "today", "tomorrow", "refund", "policy"]


def make_run(task: int, trial: int, failed: bool, rng: random.Random) -> Trace:
    steps = [Step(kind=StepKind.SYSTEM, content="You are a travel agent.", source_index=0),
             Step(kind=StepKind.USER_INPUT, source_index=1,
                  content=f"task {task}: " + " ".join(rng.choice(WORDS) for _ in range(8)))]
    n = rng.randint(3, 7)
    bad = rng.randrange(n) if failed else -1
    i = 2
    for k in range(n):
        tool = rng.choice(TOOLS)
        steps.append(Step(kind=StepKind.TOOL_CALL, tool_name=tool, tool_args={"id": rng.randint(1, 9)},
                          content="{}", call_id=f"c{k}", source_index=i))
        if k == bad:
            steps.append(Step(kind=StepKind.TOOL_RESULT, tool_name=tool, call_id=f"c{k}", source_index=i + 1,
                              status=StepStatus.OK, content="quota exceeded for this account"))
        else:
            steps.append(Step(kind=StepKind.TOOL_RESULT, tool_name=tool, call_id=f"c{k}", source_index=i + 1,
                              status=StepStatus.OK, content="ok " + " ".join(rng.choice(WORDS) for _ in range(5))))
        i += 2
    final = "sorry, I could not finish that" if failed else "done, your booking is updated"
    steps.append(Step(kind=StepKind.FINAL_OUTPUT, content=final + " " + rng.choice(WORDS), source_index=i))
    return Trace(id=f"t{task}-{trial}", steps=steps)


@pytest.fixture(scope="module")
def runs() -> tuple[list[Trace], list[bool], list[str]]:
    rng = random.Random(7)
    traces, failed, groups = [], [], []
    for task in range(40):
        p = 0.2 + 0.6 * (task % 2)
        for trial in range(3):
            f = rng.random() < p
            traces.append(make_run(task, trial, f, rng))
            failed.append(f)
            groups.append(f"task{task}")
    return traces, failed, groups


CFG = AgentModelConfig(buckets=1 << 12, internal_folds=4)


@pytest.fixture(scope="module")
def model(runs: tuple[list[Trace], list[bool], list[str]]) -> AgentModel:
    traces, failed, groups = runs
    return AgentModel.fit(traces[:90], failed[:90], groups[:90], config=CFG, agent="travel")


def test_learns_the_planted_signal_on_other_tasks(model: AgentModel, runs) -> None:
    traces, failed, _ = runs
    s = [model.score(t) for t in traces[90:]]
    assert auroc(np.array(failed[90:]), np.array(s)) > 0.95


@pytest.fixture(scope="module")
def stacked(runs: tuple[list[Trace], list[bool], list[str]]) -> AgentModel:
    traces, failed, groups = runs
    return AgentModel.fit(traces[:90], failed[:90], groups[:90],
                          config=AgentModelConfig(buckets=1 << 12, internal_folds=0, combine="stack"))


def test_stacked_model_learns_and_collapses_to_one_linear_model(stacked: AgentModel, runs) -> None:
    traces, failed, _ = runs
    s = [stacked.score(t) for t in traces[90:]]
    assert auroc(np.array(failed[90:]), np.array(s)) > 0.95
    assert stacked.fitted_ is not None and len(stacked.fitted_.meta["stack_weights"]) == 2
    st = stacked.start()
    for step in traces[95].steps:
        st.add(step)
    assert stacked.score_state(st) == pytest.approx(AgentModel.from_dict(stacked.to_dict()).score(traces[95]), abs=1e-9)


def test_mean_combination_averages_the_two_blocks_logits(runs) -> None:
    traces, failed, groups = runs
    kw = {"buckets": 1 << 12, "internal_folds": 0, "prefix_fractions": (1.0,)}
    m = AgentModel.fit(traces[:90], failed[:90], groups[:90], config=AgentModelConfig(**kw, combine="mean"))
    shape = AgentModel.fit(traces[:90], failed[:90], groups[:90], config=AgentModelConfig(**kw, ngram_weight=0.0))
    gram = AgentModel.fit(traces[:90], failed[:90], groups[:90], config=AgentModelConfig(**kw, shape_weight=0.0))
    assert m.fitted_ is not None and m.fitted_.meta["stack_weights"] == [0.5, 0.5]

    def logit(p: float) -> float:
        return float(np.log(p / (1 - p)))

    for t in traces[90:95]:
        want = 0.5 * logit(shape.score(t)) + 0.5 * logit(gram.score(t))
        assert logit(m.score(t)) == pytest.approx(want, abs=1e-4)


def test_prefix_state_equals_scoring_the_prefix_as_a_run(model: AgentModel, runs) -> None:
    traces, _, _ = runs
    for t in traces[90:95]:
        st = model.start()
        for k, step in enumerate(t.steps, 1):
            st.add(step)
            whole = model.score(t.model_copy(update={"steps": t.steps[:k]}))
            assert model.score_state(st) == pytest.approx(whole, abs=1e-9)


def _with_replies(t: Trace) -> Trace:
    """The run with an assistant message after each tool result (so the latest one changes)."""
    steps: list[Step] = []
    for s in t.steps:
        steps.append(s)
        if s.kind == StepKind.TOOL_RESULT:
            steps.append(Step(kind=StepKind.LLM_OUTPUT, source_index=s.source_index,
                              content=f"checked {s.tool_name}: {s.content[:20]}"))
    return t.model_copy(update={"steps": steps})


def test_last_turn_tokens_are_replaced_and_the_state_follows_them(runs, tmp_path) -> None:
    traces, failed, groups = runs
    tr = [_with_replies(t) for t in traces]
    cfg = AgentModelConfig(buckets=1 << 12, internal_folds=0, last_turn=True)
    m = AgentModel.fit(tr[:90], failed[:90], groups[:90], config=cfg)
    assert auroc(np.array(failed[90:]), np.array([m.score(t) for t in tr[90:]])) > 0.95
    # the counts hold the latest assistant message's last: tokens only, never an earlier one's
    st = RunCounts.empty()
    for step in tr[95].steps:
        st.add(step, cfg.buckets, last_turn=True)
    latest = [s for s in tr[95].steps if s.kind in (StepKind.LLM_OUTPUT, StepKind.FINAL_OUTPUT)][-1]
    assert sorted(st.last) == sorted(bucket(x, cfg.buckets) for x in last_tokens(latest))
    assert all(v > 0 for v in st.counts.values())
    # incremental scoring equals scoring each prefix as a run, and a saved state continues exactly
    back = AgentModel.from_dict(m.to_dict())
    for t in tr[90:93]:
        ps = m.start()
        for k, step in enumerate(t.steps, 1):
            ps.add(step)
            assert m.score_state(ps) == pytest.approx(m.score(t.model_copy(update={"steps": t.steps[:k]})), abs=1e-9)
            if k == 5:
                cont = back.state_from_dict(ps.to_dict())
        for step in t.steps[5:]:
            cont.add(step)
        assert back.score_state(cont) == pytest.approx(m.score(t), abs=1e-9)
    rows = FeatureCache().rows(tr[100], cfg.buckets, cfg.prefix_fractions, cfg.last_turn)
    assert m.score_rows(rows)[-1] == pytest.approx(m.score(tr[100]), abs=1e-9)
    # a model without last_turn reads the same trace without the last: tokens
    assert FeatureCache().rows(tr[100], cfg.buckets, cfg.prefix_fractions).grams.nnz < rows.grams.nnz


def test_cached_rows_score_like_the_trace(model: AgentModel, runs) -> None:
    traces, _, _ = runs
    cache = FeatureCache()
    t = traces[100]
    rows = cache.rows(t, CFG.buckets, CFG.prefix_fractions)
    got = model.score_rows(rows)
    cuts = prefix_lengths(len(t.steps), CFG.prefix_fractions)
    want = [model.score(t.model_copy(update={"steps": t.steps[:c]})) for c in cuts]
    np.testing.assert_allclose(got, want, atol=1e-9)


def test_round_trip_keeps_scores_version_and_state(model: AgentModel, runs, tmp_path) -> None:
    traces, _, _ = runs
    model.save(tmp_path / "m.json")
    back = AgentModel.load(tmp_path / "m.json")
    assert back.version == model.version
    assert back.at_risk_threshold == model.at_risk_threshold
    t = traces[101]
    assert back.score(t) == pytest.approx(model.score(t), abs=1e-12)
    st = model.start()
    for step in t.steps[:4]:
        st.add(step)
    cont = back.state_from_dict(st.to_dict())
    for step in t.steps[4:]:
        cont.add(step)
    assert back.score_state(cont) == pytest.approx(model.score(t), abs=1e-9)
    assert (tmp_path / "m.json").stat().st_size < 5_000_000


def test_card_and_early_warning_point(model: AgentModel) -> None:
    card = model.card
    assert card["agent"] == "travel" and card["labelled_runs"] == 90
    lo, hi = card["cv_auroc_interval"]
    assert card["cv_auroc"] > 0.8 and lo <= card["cv_auroc"] <= hi
    assert model.at_risk_threshold is not None and 0.0 < model.at_risk_threshold < 1.0


def test_prior_coefficient_stays_near_its_centre_with_few_runs(runs) -> None:
    traces, failed, groups = runs
    prior = [0.8 if f else 0.2 for f in failed]  # an informative zero-shot score
    m = AgentModel.fit(traces[:12], failed[:12], groups[:12], prior=prior[:12],
                       config=AgentModelConfig(buckets=1 << 12, internal_folds=0, prior_l2=100.0))
    assert m.fitted_ is not None and m.fitted_.w_prior == pytest.approx(1.0, abs=0.1)
    assert m.score(traces[0], prior=0.9) > m.score(traces[0], prior=0.1)


def test_unfitted_and_bad_input_say_what_to_do(runs) -> None:
    traces, failed, groups = runs
    with pytest.raises(NotFittedError, match="AgentModel.fit"):
        AgentModel().start()
    with pytest.raises(InputError, match="one entry a run"):
        AgentModel.fit(traces[:5], failed[:4], groups[:5])
    with pytest.raises(InputError, match="failed and successful"):
        AgentModel.fit(traces[:3], [True] * 3, groups[:3])
    with pytest.raises(InputError, match="unknown agent-model option"):
        AgentModelConfig.from_dict({"C": 1})


def test_logistic_matches_scikit_learn() -> None:
    sk = pytest.importorskip("sklearn.linear_model")
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5))
    y = (X @ np.array([1.0, -2.0, 0.5, 0, 0]) + rng.normal(size=200) > 0).astype(float)
    w, b, _ = fit_logistic(sp.csr_matrix(X), y, np.ones(200), 1 / 4.0, None, 0.0, 0.0)
    ref = sk.LogisticRegression(C=4.0, tol=1e-10, max_iter=10000).fit(X, y)
    np.testing.assert_allclose(w, ref.coef_[0], atol=1e-3)
    assert b == pytest.approx(ref.intercept_[0], abs=1e-3)


def test_shape_counts() -> None:
    st = RunCounts.empty()
    call = Step(kind=StepKind.TOOL_CALL, tool_name="a", tool_args={"x": 1}, content="{}", source_index=1)
    for s in (Step(kind=StepKind.USER_INPUT, content="hi", source_index=0), call, call,
              Step(kind=StepKind.TOOL_RESULT, tool_name="a", content="boom", status=StepStatus.ERROR, source_index=2)):
        st.add(s, 64)
    got = dict(zip(SHAPE_FEATURES, st.shape.tolist(), strict=True))
    assert (got["messages"], got["calls"], got["repeated_calls"], got["errors"], got["distinct_tools"]) == (3, 2, 1, 1, 1)


def test_group_runs_uses_task_ids_else_near_duplicate_requests() -> None:
    def run(text: str) -> Trace:
        return Trace(steps=[Step(kind=StepKind.USER_INPUT, content=text)])

    a = "I want to change my flight from Boston to Denver on May 3rd, reservation XYZ123 please"
    traces = [run(a), run(a + " thanks"), run("Cancel reservation ABC999 and refund me to the original card"),
              run(a), run("anything")]
    g = group_runs(traces, [None, None, None, "T7", None])
    assert g[0] == g[1] and g[0] != g[2] and g[3] == "task:T7" and len(set(g)) == 4


def test_cross_validate_pairs_the_model_with_the_cheap_learners(runs) -> None:
    pytest.importorskip("sklearn")
    traces, failed, groups = runs
    rep = cross_validate(traces, failed, groups, ks=(30, None), fractions=(0.5, 1.0), folds=4, draws=2,
                         config=AgentModelConfig(buckets=1 << 12, internal_folds=0), n_boot=200)
    r = rep["results"]["K=all|f=1"]
    assert r["folds"] == 8
    assert r["agent"]["auroc"] > 0.9
    lo, hi = r["agent_minus_tfidf"]["interval"]
    assert lo <= r["agent_minus_tfidf"]["diff"] + 1e-9 and r["agent_minus_tfidf"]["diff"] <= hi + 1e-9
    assert set(rep["results"]) == {"K=30|f=0.5", "K=30|f=1", "K=all|f=0.5", "K=all|f=1"}
    assert len(rep["oof"]["agent"]) == 2 and not np.isnan(rep["oof"]["agent"][0]).all()


def test_a_reference_model_is_fitted_on_the_same_runs_and_paired(runs) -> None:
    pytest.importorskip("sklearn")
    traces, failed, groups = runs
    cfg = AgentModelConfig(buckets=1 << 12, internal_folds=0)
    same = cross_validate(traces, failed, groups, ks=(30,), folds=3, draws=1, config=cfg, n_boot=50, reference=cfg)
    r = same["results"]["K=30|f=1"]
    assert r["agent_minus_reference"]["diff"] == 0.0 and set(r["agent_minus_reference"]["replicates"]) == {0.0}
    weak = AgentModelConfig(buckets=1 << 12, internal_folds=0, ngram_weight=0.0)  # shape only: blind to the words
    other = cross_validate(traces, failed, groups, ks=(30,), folds=3, draws=1, config=cfg, n_boot=50, reference=weak)
    d = other["results"]["K=30|f=1"]["agent_minus_reference"]
    assert d["diff"] > 0.1 and d["interval"][0] > 0


def test_early_warning_point_is_read_at_every_tenth_of_the_run_even_without_prefix_training(runs) -> None:
    traces, failed, groups = runs
    m = AgentModel.fit(traces[:90], failed[:90], groups[:90],
                       config=AgentModelConfig(buckets=1 << 12, internal_folds=3, prefix_fractions=(1.0,),
                                               target_false_alarm=0.1))
    assert set(m.card["prefix_cv_auroc"]) == {str(k / 10) for k in range(1, 11)}
    assert m.at_risk_threshold is not None
    # ``at_risk`` fires at the first step whose prefix reaches the point: on fresh runs, few successful
    # ones reach it at any step (10 % aimed for; the synthetic runs are few)
    ok = [t for t, f in zip(traces[90:], failed[90:], strict=True) if not f]
    highest = [max(m.score(t.model_copy(update={"steps": t.steps[:k]})) for k in range(1, len(t.steps) + 1))
               for t in ok]
    assert np.mean(np.array(highest) >= m.at_risk_threshold) <= 0.2


@pytest.mark.parametrize("seed", range(20))
def test_the_warning_point_lets_at_most_the_target_share_of_successful_runs_reach_it(seed: int) -> None:
    """``at_risk`` fires at ≥ the point, on a run's highest prefix score: at most ``target`` of the
    successful runs' highest scores reach it, whatever their ties (most runs tied at one score included);
    no point where too few runs place that tail."""
    from model.scoring.agentmodel.model import warning_point

    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 400))
    highest = np.round(rng.random(n), int(rng.integers(1, 4)))  # coarse rounding: many ties
    for target in (0.05, 0.1, 0.25):
        thr = warning_point(highest, target)
        if (1 - target) ** n > 0.1:  # not even the highest run can be left above the point, 90 % sure
            assert thr is None
            continue
        assert thr is not None
        assert (highest >= thr).mean() <= target
        assert thr > float(np.quantile(highest, 1 - target, method="lower"))


def test_new_successful_runs_reach_the_warning_point_at_most_the_target_share_90_percent_sure() -> None:
    """The point is a tolerance bound: over many agents' out-of-fold scores (uniform: a new run reaches
    a point ``t`` with probability ``1 - t``), the share of new successful runs reaching it exceeds the
    target for at most 10 % of the agents. A point at the target's own quantile exceeds it for about half."""
    from model.scoring.agentmodel.model import warning_point

    rng = np.random.default_rng(0)
    over = at_quantile = 0
    draws = 400
    for _ in range(draws):
        n = int(rng.integers(60, 400))
        highest = rng.random(n)
        thr = warning_point(highest, 0.05)
        assert thr is not None
        over += (1 - thr) > 0.05
        at_quantile += (1 - float(np.quantile(highest, 0.95, method="higher"))) > 0.05
    assert over / draws <= 0.13  # 0.10 expected; binomial noise over 400 agents
    assert at_quantile / draws >= 0.3


@pytest.mark.parametrize("seed", range(20))
def test_runs_answered_unhealthy_for_another_cause_spend_the_warnings_budget(seed: int) -> None:
    """The false-alarm budget is the answer's, not the warning's alone: successful runs a rule or a stream
    already flagged count as reaching the point, so flagged ∪ warned is no more than the warning alone
    would flag — and a budget they spend whole leaves no early warning."""
    from model.scoring.agentmodel.model import warning_point

    rng = np.random.default_rng(seed)
    n = int(rng.integers(60, 400))
    highest = rng.random(n)  # no ties
    target = 0.05
    alone = warning_point(highest, target)
    assert alone is not None
    budget = int((highest >= alone).sum())
    k = int(rng.integers(0, budget + 2))
    flagged = np.zeros(n, bool)
    flagged[rng.choice(n, size=k, replace=False)] = True
    thr = warning_point(highest, target, flagged)
    if k > budget:
        assert thr is None  # the other causes spent it
        return
    assert thr is not None and thr >= alone  # never a lower point than without the other causes
    assert int((flagged | (highest >= thr)).sum()) <= budget
    assert warning_point(highest, target, np.ones(n, bool)) is None
