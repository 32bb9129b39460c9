"""The run scorer: features, fit / save / load, its place in the diagnosis, and the real evaluation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from model.core.errors import InputError, NotFittedError
from model.core.metrics import auroc
from model.core.schema import FailureLabel, Step, StepKind, StepStatus, Trace, TraceLabels
from model.diagnosis.decision import Context
from model.diagnosis.diagnoser import Diagnoser
from model.diagnosis.incremental import IncrementalDiagnoser
from model.importers import load_trace
from model.scoring.runscore.features import (
    MESSAGE_FEATURES,
    RUN_FEATURES,
    SCAN_CHARS,
    is_error_step,
    message_features,
    run_features,
    scan_text,
    step_text,
)
from model.scoring.runscore.model import ARTIFACT, Example, RunScorer
from model.scoring.runscore.zeroshot import EVIDENCE_FEATURES, RECIPE, ZeroShotRecipe
from model.training.card import END, START, write_real_block
from model.training.runscore.evaluate import evaluate_real, prepare, relative_thresholds
from model.training.runscore.report import render_markdown
from tests.conftest import ROOT


def chat(*turns: dict) -> Trace:
    return load_trace({"messages": list(turns)}, format="openai")


def call(cid: str, name: str, args: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}]}


def col(name: str) -> int:
    return MESSAGE_FEATURES.index(name)


def test_the_text_a_step_shows_and_the_part_that_is_read() -> None:
    call_raw = Step(kind=StepKind.TOOL_CALL, tool_name="search", tool_args={"q": "x"}, tool_args_raw='{"q":"x"}')
    call_parsed = Step(kind=StepKind.TOOL_CALL, tool_name="search", tool_args={"q": "x"})
    assert step_text(call_raw) == 'search {"q":"x"}' and step_text(call_parsed) == "search {'q': 'x'}"
    assert step_text(Step(kind=StepKind.TOOL_CALL, tool_name="now")) == "now "
    assert step_text(Step(kind=StepKind.LLM_OUTPUT, content="hello")) == "hello"
    short, long = "a" * SCAN_CHARS, "h" * SCAN_CHARS + "m" + "t" * SCAN_CHARS
    assert scan_text(short) == short
    half = SCAN_CHARS // 2
    assert scan_text(long) == "h" * half + "\n" + "t" * half


def test_which_steps_report_an_error() -> None:
    assert is_error_step(Step(kind=StepKind.ERROR, content="boom"))
    assert is_error_step(Step(kind=StepKind.TOOL_RESULT, content="ok", status=StepStatus.TIMEOUT))
    assert is_error_step(Step(kind=StepKind.TOOL_RESULT, content="Error: 404 Not Found"))
    assert not is_error_step(Step(kind=StepKind.TOOL_RESULT, content="3 flights found"))
    assert not is_error_step(Step(kind=StepKind.LLM_OUTPUT, content="Error: I could not"))


def test_message_features_say_where_content_comes_from() -> None:
    t = chat(
        {"role": "user", "content": "What is the population of Lyon?"},
        call("a", "search", '{"q": "Lyon population"}'),
        {"role": "tool", "tool_call_id": "a", "content": "Error: 503 Service Unavailable"},
        call("b", "search", '{"q": "Lyon population"}'),
        {"role": "tool", "tool_call_id": "b", "content": "Lyon has 522,250 inhabitants (2021)."},
        {"role": "assistant", "content": "Lyon has 522,250 inhabitants; Marseille has 870,000."},
    )
    units, X = message_features(t)
    assert [u.source_index for u in units] == [1, 3, 5]
    # the retry repeats the first call exactly; it came after an error and retried it (not passed over)
    assert X[1, col("repeat_call")] == 1.0 and X[1, col("after_error")] == 1.0
    assert X[1, col("error_passed_over")] == 0.0
    # the answer: 522,250 is grounded in the result, 870,000 and Marseille are not
    assert X[2, col("novel_numbers")] == pytest.approx(np.log1p(1))
    assert X[2, col("novel_names")] == pytest.approx(np.log1p(1))
    assert X[2, col("is_final")] == 1.0 and X[2, col("last_agent_message")] == 1.0
    r = run_features(t, units, X)
    assert r[RUN_FEATURES.index("error_result_ratio")] == 0.5
    assert r[RUN_FEATURES.index("repeat_call_ratio")] == 0.5


def test_a_position_only_attribution_scores_the_same_without_the_content_features() -> None:
    """The shipped attribution weighs only where a message sits: scoring skips the content features
    (``message_features(content=False)``) and gives bit for bit what the full features give."""
    from model.data.realdata import first_groups, load_source
    from model.scoring.runscore.features import POSITION_FEATURES

    scorer = RunScorer.load()
    assert scorer.attribution == "position" and not scorer._reads_content()
    full = RunScorer.load()
    full.run_features = True  # reads the content again; the probability ignores run features it did not keep
    runs = [r for source in ("tau_airline", "swe", "whowhen") for r in first_groups(load_source(source), 2)]
    for run in runs:
        units, X = message_features(run.trace)
        units2, X2 = message_features(run.trace, content=False)
        k = len(POSITION_FEATURES)
        assert units2 == units and np.array_equal(X2[:, :k], X[:, :k]) and not X2[:, k:].any()
        a = scorer.score(run.trace, rule_confidence=0.7, evidence={"signal": 0.4})
        b = full.score(run.trace, rule_confidence=0.7, evidence={"signal": 0.4})
        assert (a.failure_probability, a.attribution, a.message_probabilities) == (
            b.failure_probability, b.attribution, b.message_probabilities)


def test_chinese_words_are_read_as_overlapping_pairs() -> None:
    """A phrase repeated inside another sentence is not new content (a run of 4+ Chinese characters
    used to be one "word", so every Chinese answer read as novel and was flagged)."""
    t = chat(
        {"role": "user", "content": "请帮我查一下北京明天的天气预报"},
        {"role": "assistant", "content": "好的，北京明天的天气预报是晴天"},
    )
    units, X = message_features(t)
    assert X[0, col("novel_word_ratio")] < 0.5
    t2 = chat(
        {"role": "user", "content": "请帮我查一下北京明天的天气预报"},
        {"role": "assistant", "content": "上海股票市场今日大幅上涨百分之三"},
    )
    _, X2 = message_features(t2)
    assert X2[0, col("novel_word_ratio")] == 1.0


def test_an_error_passed_over_and_a_hedge() -> None:
    t = chat(
        {"role": "user", "content": "Book me a table at Nopi."},
        call("a", "book_table", '{"name": "Nopi"}'),
        {"role": "tool", "tool_call_id": "a", "content": '{"error": "restaurant closed"}'},
        {"role": "assistant", "content": "Done! Your table at Nopi is booked for 8pm."},
    )
    units, X = message_features(t)
    assert X[1, col("error_passed_over")] == 1.0 and X[1, col("hedge")] == 0.0
    t2 = chat(*[m for m in [
        {"role": "user", "content": "Book me a table at Nopi."},
        call("a", "book_table", '{"name": "Nopi"}'),
        {"role": "tool", "tool_call_id": "a", "content": '{"error": "restaurant closed"}'},
        {"role": "assistant", "content": "Sorry, I couldn't book it: the booking failed."},
    ]])
    _, X2 = message_features(t2)
    assert X2[1, col("error_passed_over")] == 0.0 and X2[1, col("hedge")] == 1.0


def labelled(t: Trace, failed: bool, at: int | None) -> Trace:
    fails = [FailureLabel(kind=None, source_index=at)] if failed and at is not None else []
    t.labels = TraceLabels(failed=failed, failures=fails)
    return t


def toy_examples(rng: np.random.Generator, source: str, n: int, flip: bool = False) -> list[Example]:
    """Runs whose failures make up a figure in a longer answer (the made-up figure: the attribution's
    cue); their evidence: the classifier's ``hallucination`` maximum higher on failed runs, its
    ``refusal`` maximum higher on failed runs of every set but a ``flip`` one (a cue that points the
    wrong way there), ``signal`` noise."""
    out = []
    for i in range(n):
        failed = bool(i % 2)
        k = int(rng.integers(1, 4))
        turns: list[dict] = [{"role": "user", "content": f"Question {i}: the price of item {i}?"}]
        for j in range(k):
            turns += [call(f"c{j}", "lookup", f'{{"id": {i * 10 + j}}}'),
                      {"role": "tool", "tool_call_id": f"c{j}", "content": f"item {i} costs {100 + j} euros"}]
        answer = f"It costs {999 + i} euros, {12 + i} left." if failed else f"It costs {100} euros."
        turns.append({"role": "assistant", "content": answer})
        t = labelled(chat(*turns), failed, len(turns) - 1)
        ev = {"clf:hallucination": float(np.clip(rng.normal(0.6 if failed else 0.3, 0.1), 0, 1)),
              "clf:refusal": float(np.clip(rng.normal(0.3 if failed == flip else 0.6, 0.1), 0, 1)),
              "signal": float(rng.uniform())}
        out.append(Example.from_trace(t, source, f"{source}:{i}", evidence=ev))
    return out


def test_fit_predict_save_load(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    ex = toy_examples(rng, "a", 40) + toy_examples(rng, "b", 40, flip=True)
    scorer = RunScorer(target_false_alarm=0.1).fit(ex)
    # kept: the cue with one direction on both sets; left out: the one that flips, and the noise
    # (AUROC below 0.5 − tolerance on a set)
    assert "clf:hallucination" in scorer.features_ and "clf:refusal" not in scorer.features_
    assert scorer.meta_["trained_on"] == ["a", "b"] and scorer.recipe == RECIPE
    zs = scorer.zero_shot_
    assert zs is not None and zs.prior == pytest.approx(0.5) and zs.base == pytest.approx(0.5)  # no rule fired
    p = np.array([scorer.score_example(e)[0] for e in ex])
    y = np.array([e.failed for e in ex]).astype(int)
    assert auroc(y, p) > 0.9
    # a small continuous part around the prior: it never moves a run by more than delta on the logit
    assert np.all(np.abs(np.log(p / (1 - p))) <= scorer.delta + 1e-9)
    # the operating point: at most 10 % of each set's successful runs, and above what the continuous
    # part reaches alone: no run is flagged without a rule's failure behind it
    assert not (p >= scorer.threshold).any()
    assert scorer.threshold >= zs.probability(None, dict.fromkeys(zs.features, 1.0))
    # a rule's failure raises the probability to its measured confidence, never lowers it
    assert scorer.probability(0.9, ex[0].evidence) > scorer.probability(None, ex[0].evidence)
    assert scorer.probability(0.1, ex[0].evidence) == scorer.probability(None, ex[0].evidence)
    path = tmp_path / "runscore.json"
    scorer.save(path)
    again = RunScorer.load(path)
    assert again.version == scorer.version
    assert [again.score_example(e)[0] for e in ex] == pytest.approx([scorer.score_example(e)[0] for e in ex], abs=1e-6)
    # attribution lands on the answer that makes up the figure
    probs = scorer.score_example(ex[1])[1]
    assert ex[1].units[int(np.argmax(probs))].source_index == ex[1].fail_source_index


def test_zero_shot_weights_can_only_raise_the_probability() -> None:
    """Every kept feature enters with weight +delta / k: more evidence never lowers the probability."""
    r = ZeroShotRecipe(features=["clf:hallucination", "signal"], prior=0.4, base=0.3, centre=0.25, delta=0.5,
                       threshold=0.95)
    lo = r.probability(None, {"clf:hallucination": 0.1, "signal": 0.0})
    mid = r.probability(None, {"clf:hallucination": 0.5, "signal": 0.0})
    hi = r.probability(None, {"clf:hallucination": 0.5, "signal": 1.0})
    assert lo < mid < hi < r.threshold
    assert r.probability(None, {}) == pytest.approx(0.3)  # nothing measured: the base rate
    assert r.probability(0.8, {}) == pytest.approx(0.8)
    assert ZeroShotRecipe.from_dict(r.to_dict()) == r
    with pytest.raises(InputError, match="refit"):
        ZeroShotRecipe.from_dict({**r.to_dict(), "features": ["run:messages_log"]})
    with pytest.raises(InputError, match="refit"):
        ZeroShotRecipe.from_dict({**r.to_dict(), "recipe": "zero-shot-other"})


def test_unfitted_and_foreign_artefacts_are_refused(tmp_path: Path) -> None:
    with pytest.raises(NotFittedError, match="fit"):
        RunScorer().score(chat({"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}))
    d = json.loads(ARTIFACT.read_text())
    d["message_features"] = ["bias"]
    with pytest.raises(InputError, match="refit"):
        RunScorer.from_dict(d)
    (tmp_path / "x.json").write_text("{")
    with pytest.raises(InputError, match="not a run scorer"):
        RunScorer.load(tmp_path / "x.json")
    with pytest.raises(InputError, match="both failed and successful"):
        RunScorer().fit([e for e in toy_examples(np.random.default_rng(1), "a", 10) if e.failed])


def fixed_scorer(threshold: float, base: float, delta: float = 2.0) -> RunScorer:
    """A hand-set scorer: p = sigmoid(logit(base) + delta · (hallucination maximum − 0.2)),
    attribution on novelty."""
    d = json.loads(ARTIFACT.read_text())
    w = [0.0] * len(MESSAGE_FEATURES)
    w[col("novel_numbers")] = 3.0
    d.update({"message_weights": w, "zero_shot": {"recipe": RECIPE, "features": ["clf:hallucination"],
                                                  "prior": base, "base": base, "centre": 0.2, "delta": delta,
                                                  "threshold": threshold}})
    return RunScorer.from_dict(d)


class NoveltyProbe:
    """A trace detector in the classifier's place (``inspect_scored``): no findings, and as the
    ``hallucination`` maximum the share of the last answer's words that no earlier message holds."""

    name = "novelty_probe"
    version = "1"

    def inspect(self, trace: Trace) -> list:
        return []

    def inspect_scored(self, trace: Trace) -> tuple[list, dict[str, float]]:
        units, X = message_features(trace)
        return [], {"hallucination": float(X[-1, col("novel_word_ratio")]) if len(units) else 0.0}


HEALTHY_LOOKING = [
    {"role": "user", "content": "Weather in Oslo?"},
    call("a", "get_weather", '{"city": "Oslo"}'),
    {"role": "tool", "tool_call_id": "a", "content": "Oslo: 4 C, light rain"},
    {"role": "assistant", "content": "It is 4 C with light rain in Oslo; about 17 mm expected."},
]


def test_the_run_verdict_in_the_diagnosis() -> None:
    t = load_trace({"messages": HEALTHY_LOOKING}, format="openai")
    quiet = Diagnoser(runscorer=fixed_scorer(threshold=0.99, base=0.73)).diagnose(t)
    assert quiet.healthy is True and quiet.primary is None
    assert quiet.failure_probability == pytest.approx(0.73)  # no classifier ran: its part counts as its centre
    assert quiet.attribution is not None and quiet.attribution.source_index == 3  # present when healthy too
    loud = Diagnoser(runscorer=fixed_scorer(threshold=0.7, base=0.8)).diagnose(t)
    assert loud.healthy is False and loud.failure_probability >= 0.7
    p = loud.primary
    assert p is not None and p.detector == "runscore" and p.confidence == loud.failure_probability
    assert (p.step, p.source_index) == (loud.attribution.step, 3)
    assert p.kind.value == "hallucination" and loud.recommendation.strategy.value == "self_correct"
    # mid-run (a session): the probability is reported and decides nothing
    mid = IncrementalDiagnoser(Diagnoser(runscorer=fixed_scorer(threshold=0.7, base=0.8))).diagnose(t, {})
    assert mid.healthy is True and mid.failure_probability == loud.failure_probability
    # a relative operating point from the caller may raise the zero-shot bar ...
    rel = Diagnoser(runscorer=fixed_scorer(threshold=0.7, base=0.8)).decide(t, Context(run_threshold=0.9999999))
    assert rel.response.healthy is True
    # ... never lower it: zero-shot, the probability flags only at the fixed low-false-alarm point
    low = Diagnoser(runscorer=fixed_scorer(threshold=0.99, base=0.73)).decide(t, Context(run_threshold=0.01)).response
    assert low.healthy is True and low.failure_probability is not None and low.failure_probability < 0.99
    # options.detectors without "runscore" leaves it out; with it, in
    d = Diagnoser(runscorer=fixed_scorer(threshold=0.5, base=0.8))
    from model.core.options import DiagnoseOptions
    assert d.diagnose(t, DiagnoseOptions(detectors=["loop"])).failure_probability is None
    assert d.diagnose(t, DiagnoseOptions(detectors=["loop", "runscore"])).failure_probability is not None


def test_classifier_gate_is_decided_without_the_held_out_family() -> None:
    """Leave-one-source-out, a classifier kind's failure/signal verdict on a set comes from the
    other families' runs only; over all six it reads every set (the evidence ``gate.json`` takes)."""
    from model.data.realdata import load_source

    runs = load_source("tau_airline")[:60] + load_source("tau2")[:40] + load_source("agentprocessbench")[:40]
    prepared = prepare(runs)
    fired_on = 0
    for p in prepared:  # the kind "fires" on every failed airline-family run, nowhere else
        if p.run.source in ("tau_airline", "tau2") and p.run.failed:
            p.classifier_kinds = frozenset({"off_topic"})
            fired_on += 1
    assert fired_on >= 20
    good = {"precision": 0.95, "support": 30}
    gen = {"test": {"off_topic": good}, "heldout_families": {"off_topic": good}}
    report = evaluate_real(prepared, {}, in_domain_folds=0, generated_per_kind=gen,
                           lookalikes={"n": 60, "fired": {}})
    gate = report["classifier_gate"]
    assert gate["real"]["off_topic"] == {"fired": fired_on, "failed": fired_on}
    assert gate["decision"]["failure_kinds"] == ["off_topic"]
    sets = report["sets"]
    # held out, the airline family never vouches for itself: its verdict has no classifier failure
    assert sets["tau_airline"]["model"]["classifier_failure_kinds"] == []
    assert sets["tau2"]["model"]["classifier_failure_kinds"] == []
    assert sets["agentprocessbench"]["model"]["classifier_failure_kinds"] == ["off_topic"]
    # rules alone flag no tau_airline run here but the trusted kind would flag every failed one
    tau_rules = sets["tau_airline"]["operating_point"]["rules_only"]["recall"]["hits"]
    assert tau_rules < sum(p.run.failed for p in prepared if p.run.source == "tau_airline")
    md = render_markdown(report)
    assert "Step classifier, zero-shot" in md and "| off_topic |" in md


def test_relative_thresholds_leave_the_runs_own_group_out() -> None:
    probs = np.array([0.1, 0.2, 0.9, 0.3])
    thr = relative_thresholds(probs, ["a", "a", "b", "c"], 0.5)
    up = lambda v: float(np.nextafter(np.quantile(v, 0.5), 2.0))  # noqa: E731 - strictly above the quantile
    assert thr.tolist() == [up([0.9, 0.3])] * 2 + [up([0.1, 0.2, 0.3]), up([0.1, 0.2, 0.9])]
    # runs that all score alike are no alarm
    same = np.full(6, 0.4)
    assert not (same >= relative_thresholds(same, list("aabbcc"), 0.1)).any()


@pytest.mark.slow
def test_leave_one_source_out_on_a_sample_of_the_real_sets() -> None:
    from model.data.realdata import load_source

    runs = []
    for s, n in (("tau_airline", 32), ("agentprocessbench", 40), ("swe", 40), ("whowhen", 24), ("tau2", 40),
                 ("webshop", 40)):
        runs += load_source(s)[:n]
    report = evaluate_real(prepare(runs), {}, in_domain_folds=2)
    for s, e in report["sets"].items():
        assert s not in e["model"]["trained_on"]  # fitted without the set it is scored on
    # the two airline sets are one family: each is judged by a scorer that saw neither
    assert not {"tau_airline", "tau2"} & set(report["sets"]["tau2"]["model"]["trained_on"])
    assert not {"tau_airline", "tau2"} & set(report["sets"]["tau_airline"]["model"]["trained_on"])
    assert "webshop" in report["sets"]["tau2"]["model"]["trained_on"]
    tau = report["sets"]["tau_airline"]
    assert tau["runs"] == 32 and 0 <= tau["auroc"]["ci"][0] <= tau["auroc"]["auroc"] <= tau["auroc"]["ci"][1] <= 1
    assert set(tau["baselines"]) == {"messages", "tool calls", "characters"}
    assert report["sets"]["whowhen"]["localisation"]["runs"] == 24  # one label on a tool message: a miss for all
    assert "agent message 1" in report["sets"]["whowhen"]["localisation"]["baselines"]
    md = render_markdown(report)
    assert "| tau_airline |" in md and "Who" not in md.split("\n")[0]


def test_shipped_artefact_loads_and_names_its_data() -> None:
    s = RunScorer.load()
    assert s.features_ and set(s.features_) <= set(EVIDENCE_FEATURES) and s.recipe == RECIPE
    assert {"tau_airline", "agentprocessbench", "swe"} <= set(s.meta_["trained_on"])
    assert any(k.startswith("swe/") for k in s.meta_["data"])


def test_cli_diagnose_loads_the_service_models_and_prints_one_json_list(tmp_path: Path) -> None:
    f = tmp_path / "two.jsonl"
    f.write_text(json.dumps({"messages": HEALTHY_LOOKING}) + "\n" + json.dumps({"messages": HEALTHY_LOOKING[:2]}) + "\n")
    run = [sys.executable, "-m", "serve.cli.main", "diagnose"]
    one = subprocess.run([*run, "docs/examples/healthy.json", "--json"], cwd=ROOT, capture_output=True, timeout=120)
    assert one.returncode == 0, one.stderr.decode()
    body = json.loads(one.stdout)
    assert {"classifier", "runscore"} <= set(body["detector_versions"])
    assert body["failure_probability"] is not None and body["attribution"]["source_index"] >= 0
    bare = subprocess.run([*run, "docs/examples/healthy.json", "--json", "--no-classifier"], cwd=ROOT,
                          capture_output=True, timeout=120)
    assert "classifier" not in json.loads(bare.stdout)["detector_versions"]


def test_rule_precision_is_measured_and_a_noisy_rule_is_demoted() -> None:
    from model.scoring.runscore.model import PRIOR_RUNS, rule_stats

    rng = np.random.default_rng(3)
    ex = toy_examples(rng, "a", 20) + toy_examples(rng, "b", 20)
    for i, e in enumerate(ex):
        # "loud" fires on every third successful run of set a and on half the failed runs; "quiet" on failed only
        loud = (not e.failed and e.source == "a" and i % 3 == 0) or (e.failed and i % 4 == 1)
        e.rules = tuple(r for r, on in (("loud", loud), ("quiet", e.failed and i % 4 == 1)) if on)
    st = rule_stats(ex, ["a", "b"])
    assert st["loud"]["sets"]["a"]["fired_on_successful"] == sum(
        1 for i, e in enumerate(ex) if e.source == "a" and not e.failed and i % 3 == 0)
    assert st["loud"]["demoted"] is True and st["quiet"]["demoted"] is False
    assert st["quiet"]["precision"] == 1.0 and st["quiet"]["precision"] > st["loud"]["precision"]
    scorer = RunScorer().fit(ex)
    # the estimate: the finding's own confidence as a prior worth PRIOR_RUNS firings, then the data
    n, p = st["quiet"]["fired"], st["quiet"]["precision"]
    conf, extra = scorer.rule_confidence("quiet", 0.6)
    assert conf == round((n * p + PRIOR_RUNS * 0.6) / (n + PRIOR_RUNS), 4) and 0.6 < conf < 1.0
    assert extra == {"p_run_failed": conf, "measured": {"fired": n, "precision": p, "prior": 0.6}}
    loud, extra = scorer.rule_confidence("loud", 0.9)
    assert loud < 0.9 and extra["demoted"] == {"max_false_alarm_rate": st["loud"]["max_false_alarm_rate"]}
    assert scorer.rule_raises("quiet", 0.6) and not scorer.rule_raises("loud", 0.99)
    assert scorer.rule_confidence("never_seen", 0.9) == (0.9, {})


def test_a_demoted_rule_only_signals_and_a_measured_one_carries_its_estimate() -> None:
    from model.detectors.catalog import make_detector
    from model.diagnosis.diagnoser import Diagnoser

    t = chat({"role": "user", "content": "Weather in Oslo?"},
             call("a", "get_weather", '{"city": "Oslo"}'),
             {"role": "tool", "tool_call_id": "a", "content": "Error: service unavailable"},
             {"role": "assistant", "content": "It is sunny and 25 C in Oslo."})
    rules = Diagnoser([make_detector("ignored_error")])
    raw = rules.findings(t)
    assert raw and raw[0].confidence >= 0.5
    rng = np.random.default_rng(5)
    ex = toy_examples(rng, "a", 20) + toy_examples(rng, "b", 20)
    for i, e in enumerate(ex):  # fires on half the successful runs of set a: demoted
        e.rules = ("ignored_error",) if (not e.failed and e.source == "a" and i % 2 == 0) else ()
    noisy = RunScorer().fit(ex)
    out = Diagnoser([make_detector("ignored_error")], runscorer=noisy).diagnose(t)
    assert not any(f.detector == "ignored_error" for f in out.failures)
    sig = next(f for f in out.signals if f.kind.value == "ignored_error")
    assert "demoted" in sig.details and sig.details["measured"]["precision"] == 0.0
    for i, e in enumerate(ex):  # fires on failed runs only: kept, its confidence estimated
        e.rules = ("ignored_error",) if e.failed and i % 3 == 0 else ()
    precise = RunScorer().fit(ex)
    out = Diagnoser([make_detector("ignored_error")], runscorer=precise).diagnose(t)
    fail = next(f for f in out.failures if f.detector == "ignored_error")
    assert fail.confidence > raw[0].confidence and fail.details["p_run_failed"] == fail.confidence


def _answer_run(i: int, answer: str) -> Trace:
    t = chat({"role": "user", "content": f"Weather in Oslo on day {i}?"},
             call("a", "get_weather", '{"city": "Oslo"}'),
             {"role": "tool", "tool_call_id": "a", "content": "Oslo: 4 C, light rain"},
             {"role": "assistant", "content": answer})
    t.id = f"run-{i}"
    t.task_type = "weather"
    return t


def test_the_agents_own_operating_point_only_raises_the_zero_shot_one(tmp_path: Path) -> None:
    """After 50 auto-fed runs of a task type (naming the agent: options.agent_from_task_type) the service
    reads that agent's upper percentile; zero-shot
    (issue 20, item 7) it may raise the fixed low-false-alarm point, never lower it."""
    from serve.settings import Settings
    from serve.wiring import build_service

    grounded = "Oslo: 4 C, light rain."
    novel = "Expect thunderstorms, heavy hail and strong northerly gales tomorrow."
    from model.core.options import DiagnoseOptions

    # the fixed point 0.99 is above every probability: the agent's percentile, lower, does not flag
    scorer = fixed_scorer(threshold=0.99, base=0.6)  # p = sigmoid(logit 0.6 + 2·(novel word ratio − 0.2)) < 0.99
    svc = build_service(Settings(database_url=f"sqlite:///{tmp_path / 'rel.db'}"),
                        Diagnoser([NoveltyProbe()], runscorer=scorer))
    first = svc.diagnose("t", _answer_run(0, novel), DiagnoseOptions(agent_from_task_type=True))
    assert first.healthy is True and first.failure_probability < 0.99
    for i in range(1, 60):
        svc.diagnose("t", _answer_run(i, grounded), DiagnoseOptions(agent_from_task_type=True))
    svc.streams.drain()  # the runs' values, as the worker's feeder applies them within TRIAGE_STREAM_FEED_S
    svc.diagnoses._relative_cache.clear()  # the per-worker cache (30 s) would hold the value from before
    rel = svc.relative_threshold("t", "weather", scorer)
    assert rel is not None and rel < 0.99
    odd = svc.diagnose("t", _answer_run(101, novel), DiagnoseOptions(agent_from_task_type=True))
    assert odd.healthy is True and odd.failure_probability is not None and rel <= odd.failure_probability < 0.99
    # a fixed point every run passes: an agent whose usual runs all score high raises it to its own
    low = fixed_scorer(threshold=0.5, base=0.6)
    svc2 = build_service(Settings(database_url=f"sqlite:///{tmp_path / 'rel2.db'}"),
                         Diagnoser([NoveltyProbe()], runscorer=low))
    assert svc2.diagnose("t", _answer_run(0, grounded), DiagnoseOptions(agent_from_task_type=True)).healthy is False  # the fixed point
    for i in range(1, 60):
        svc2.diagnose("t", _answer_run(i, grounded), DiagnoseOptions(agent_from_task_type=True))
    svc2.streams.drain()
    svc2.diagnoses._relative_cache.clear()
    same = svc2.diagnose("t", _answer_run(100, grounded), DiagnoseOptions(agent_from_task_type=True))
    assert same.healthy is True  # like the agent's usual runs: no alarm
    odd2 = svc2.diagnose("t", _answer_run(101, novel), DiagnoseOptions(agent_from_task_type=True))
    assert odd2.healthy is False and odd2.primary is not None and odd2.primary.detector == "runscore"
    assert odd2.primary.details["threshold"] > 0.5  # the agent's own point, above the fixed one


def test_the_real_block_leads_the_card_and_is_replaced_not_doubled(tmp_path: Path) -> None:
    report = json.loads((ROOT / "reports" / "real.json").read_text(encoding="utf-8"))
    card = tmp_path / "MODEL_CARD.md"
    write_real_block(report, card, "v1")
    alone = card.read_text(encoding="utf-8")
    assert alone.startswith(START) and "(v1)" in alone and alone.count(END) == 1
    card.write_text(alone + "\n## Synthetic figures\n\nkept\n", encoding="utf-8")
    write_real_block(report, card, "v2")
    text = card.read_text(encoding="utf-8")
    assert text.startswith(START) and text.count(START) == 1 and "(v2)" in text and "(v1)" not in text
    assert text.endswith("## Synthetic figures\n\nkept\n")
