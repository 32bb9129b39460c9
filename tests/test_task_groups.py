"""Task groups recovered without task ids (model/training/agentmodel/groups.py)."""

from __future__ import annotations

import json
import random

import pytest

from model.core.errors import InputError
from model.core.schema import Step, StepKind, StepStatus, Trace
from model.data.stranger import stranger
from model.training.agentmodel.cv import group_runs as group_runs_from_cv
from model.training.agentmodel.groups import GroupingConfig, _cosines, cluster_tasks, group_runs, task_view
from model.training.agentmodel.groups_eval import baseline_groups, score

_FILLER = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu"]
_GREET = ["Hi!", "Hello there.", "Good morning,", "Hey,", ""]
_CLOSE = ["Thanks a lot.", "Can you help?", "Please sort it out.", "", "I appreciate it."]


def _template(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_FILLER) for _ in range(words))


def _partition(groups: list[str]) -> set[frozenset[int]]:
    by: dict[str, set[int]] = {}
    for i, g in enumerate(groups):
        by.setdefault(g, set()).add(i)
    return {frozenset(v) for v in by.values()}


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    syl = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "sa", "do", "gu", "fi", "ho", "be", "xa"]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syl) for _ in range(3)))
    return sorted(words)


def templated_runs(tasks: int, trials: int, seed: int = 0) -> tuple[list[Trace], list[int]]:
    """An agent whose every run opens with one long template (a 400-word system policy, then
    instructions, the task, and a 200-word worked example after it, in the user message); each task
    is five content words and an order id, each trial says four of the five in its own order with
    its own greeting and closing, then looks the order up (the call's arguments and answer name the
    task). Shuffled."""
    rng = random.Random(seed)
    policy = _template(rng, 400)
    head = "Answer the request below. You may call lookup_order with an order id. " + _template(rng, 80)
    tail = "Example of a good answer: " + _template(rng, 200)
    vocab = _vocabulary(rng, 400)
    runs: list[tuple[Trace, int]] = []
    for t in range(tasks):
        order = f"ORD{1000 + 37 * t}"
        words = rng.sample(vocab, 5)
        for k in range(trials):
            r = random.Random(seed * 1000 + t * 100 + k)
            said = r.sample(words, 4)
            parts = [f"my order {order} has the {said[0]} and {said[1]}", f"it came with {said[2]}",
                     f"I need the {said[3]} fixed"]
            r.shuffle(parts)
            ask = " ".join([r.choice(_GREET), ". ".join(parts) + ".", r.choice(_CLOSE)]).strip()
            answer = json.dumps({"order_id": order, "items": words, "status": "lost" if t % 3 else "late"})
            steps = [Step(kind=StepKind.SYSTEM, content=policy, source_index=0),
                     Step(kind=StepKind.USER_INPUT, content=f"{head}\n\n{ask}\n\n{tail}", source_index=1),
                     Step(kind=StepKind.TOOL_CALL, tool_name="lookup_order", tool_args={"order_id": order},
                          call_id=f"c{k}", source_index=2),
                     Step(kind=StepKind.TOOL_RESULT, tool_name="lookup_order", content=answer, call_id=f"c{k}",
                          source_index=3),
                     Step(kind=StepKind.FINAL_OUTPUT, content=f"Done {r.random():.3f}", source_index=4)]
            runs.append((Trace(steps=steps), t))
    rng.shuffle(runs)
    return [r for r, _ in runs], [t for _, t in runs]


def _truth(tasks: list[int]) -> set[frozenset[int]]:
    return _partition([str(t) for t in tasks])


@pytest.mark.parametrize(("tasks", "trials", "seed"), [(12, 4, 0), (30, 3, 1), (6, 5, 2), (100, 3, 8), (2, 2, 5)])
def test_shared_long_template_gives_exactly_the_tasks(tasks: int, trials: int, seed: int) -> None:
    traces, truth = templated_runs(tasks, trials, seed)
    groups = group_runs(traces, [None] * len(traces))
    assert _partition(groups) == _truth(truth)
    assert all(g.startswith("req:") for g in groups)
    assert group_runs_from_cv is group_runs  # cv re-exports the one implementation


def test_the_opening_alone_finds_the_task_inside_a_template() -> None:
    """No calls at all: the task is only the part of the opening that differs (AgentProcessBench's
    shape, where the old trigram clustering made one group of everything)."""
    traces, truth = templated_runs(10, 5, seed=3)
    bare = [t.model_copy(update={"steps": t.steps[:2]}) for t in traces]
    assert _partition(group_runs(bare, [None] * len(bare))) == _truth(truth)


def test_task_ids_win_and_stay_apart_from_recovered_groups() -> None:
    traces, truth = templated_runs(4, 3)
    ids: list[str | None] = [None] * len(traces)
    ids[0] = "T7"
    ids[1] = "T7"
    g = group_runs(traces, ids)
    assert g[0] == g[1] == "task:T7"
    assert not any(x.startswith("task:") for x in g[2:])
    rest = [i for i in range(2, len(traces))]
    assert _partition([g[i] for i in rest]) == _partition([str(truth[i]) for i in rest])


def test_one_run_empty_openings_and_no_runs() -> None:
    traces, _ = templated_runs(1, 1)
    assert group_runs(traces, [None]) == ["req:0"]
    assert group_runs([], []) == []
    empty = [Trace(steps=[]), Trace(steps=[Step(kind=StepKind.USER_INPUT, content="   ")]), Trace(steps=[])]
    assert group_runs(empty, [None, None, None]) == ["run:0", "run:1", "run:2"]
    assert cluster_tasks(empty) == [-1, -1, -1]


def test_identical_runs_are_one_task_and_different_tasks_never_one_group() -> None:
    traces, _ = templated_runs(1, 1)
    same = [traces[0].model_copy(deep=True) for _ in range(6)]
    assert len(set(group_runs(same, [None] * 6))) == 1
    two = [Trace(steps=[Step(kind=StepKind.USER_INPUT, content="Refund order 7731 to my card")]),
           Trace(steps=[Step(kind=StepKind.USER_INPUT, content="Book a table for two at Nopa tonight")])]
    assert len(set(group_runs(two, [None, None]))) == 2


def test_same_opening_different_starting_state_is_not_one_task() -> None:
    """Runs whose openings are identical but whose first call is answered differently started
    from different states: never one group; trials of each state stay together."""
    runs, truth = [], []
    for state in range(4):
        for k in range(3):
            answer = json.dumps({"line": "L1", "status": ["active", "suspended", "roaming", "capped"][state],
                                 "used_gb": [1.5, 8.7, 15.1, 3.2][state]})
            runs.append(Trace(steps=[
                Step(kind=StepKind.USER_INPUT, content="My phone has no service, please fix it.", source_index=0),
                Step(kind=StepKind.TOOL_CALL, tool_name="get_line", tool_args={"id": "L1"}, call_id="a",
                     source_index=1),
                Step(kind=StepKind.TOOL_RESULT, tool_name="get_line", content=answer, call_id="a", source_index=2),
                Step(kind=StepKind.LLM_OUTPUT, content=f"Let me check {k}", source_index=3)]))
            truth.append(state)
    assert _partition(group_runs(runs, [None] * len(runs))) == _truth(truth)


def test_errors_are_not_a_state() -> None:
    """A failed call says nothing of the task: two trials of one task, one of whose first call
    failed, stay one group."""
    def run(fail: bool) -> Trace:
        res = Step(kind=StepKind.TOOL_RESULT, tool_name="get", call_id="a", source_index=2,
                   content="timeout" if fail else '{"id": "X9", "v": 1}',
                   status=StepStatus.ERROR if fail else None)
        return Trace(steps=[Step(kind=StepKind.USER_INPUT, content="Check account X9 balance", source_index=0),
                            Step(kind=StepKind.TOOL_CALL, tool_name="get", tool_args={"id": "X9"}, call_id="a",
                                 source_index=1), res])
    other = Trace(steps=[Step(kind=StepKind.USER_INPUT, content="Close account Q4 today", source_index=0)])
    g = group_runs([run(False), run(True), other], [None, None, None])
    assert g[0] == g[1] != g[2]


def test_bad_input_names_the_field() -> None:
    with pytest.raises(InputError) as e:
        group_runs([Trace(steps=[])], [])
    assert e.value.path == "task_ids"
    with pytest.raises(InputError) as e2:
        GroupingConfig(threshold=1.5)
    assert e2.value.path == "threshold"
    with pytest.raises(InputError) as e3:
        GroupingConfig(max_postings=-1)
    assert e3.value.path == "max_postings"


def test_candidate_pairs_are_bounded_by_max_postings() -> None:
    """A feature in more runs than ``max_postings`` makes no pairs: the work stays linear in the
    runs, whatever the template."""
    n = 3000
    feats = [frozenset({"template", f"own{i}", f"pair{i // 2}"}) for i in range(n)]
    sims = _cosines(feats, [1] * n, 1.0, 64)
    assert len(sims) == n // 2
    assert all(b == a + 1 for a, b in sims)


def test_the_view_reads_no_ids_labels_or_task_type() -> None:
    traces, _ = templated_runs(2, 1)
    t = traces[0]
    named = t.model_copy(update={"id": "tau_airline:7:0", "task_type": "tau_airline", "metadata": {"task_id": "7"}})
    assert task_view(named) == task_view(t)
    assert stranger(named, "run-3").id == "run-3" and stranger(named, "run-3").metadata == {} \
        and stranger(named, "run-3").task_type is None


def test_score_counts_pairs_and_bcubed() -> None:
    s = score(["a", "a", "b", "b"], ["x", "x", "x", "y"], n_boot=50)
    assert (s.tasks, s.groups) == (2, 2)
    assert s.pair_recall == pytest.approx(1 / 3)
    assert s.pair_precision == pytest.approx(1 / 2)
    assert s.bcubed_p == pytest.approx((1 + 1 + 0.5 + 0.5) / 4)
    assert s.bcubed_r == pytest.approx((2 / 3 + 2 / 3 + 1 / 3 + 1) / 4)


def test_a_few_real_runs_stripped() -> None:
    """Real runs, named nothing: AgentProcessBench's shared template (one group before) and
    τ-airline's paraphrasing simulated user (mostly one group per trial before)."""
    from model.data.realdata import first_groups, load_source

    for source, tasks in (("agentprocessbench", 8), ("tau_airline", 20)):
        runs = first_groups(load_source(source), tasks)
        traces = [stranger(r.trace, f"run-{k}") for k, r in enumerate(runs)]
        truth = [r.group for r in runs]
        s = score(group_runs(traces, [None] * len(traces)), truth, n_boot=10)
        before = score(baseline_groups(traces), truth, n_boot=10)
        assert s.tasks == tasks
        assert tasks / 2 <= s.groups <= 1.5 * tasks
        if source == "agentprocessbench":
            assert s.bcubed_f1 == 1.0
            assert before.groups <= 3
        else:
            assert s.pair_recall >= 0.85
            assert before.pair_recall < 0.3


def test_two_near_duplicates_out_of_three_are_a_task_not_a_template() -> None:
    ask = "please refund order 1234 for Ana Lima, the blue shoes were too small"
    runs = [Trace(steps=[Step(kind=StepKind.USER_INPUT, content=t)])
            for t in (ask, ask + " thanks", "book a flight from Lisbon to Porto next Monday")]
    g = group_runs(runs, [None, None, None])
    assert g[0] == g[1] != g[2]


def test_the_groups_do_not_depend_on_the_order_of_the_runs() -> None:
    """Ties and a node's representative are broken by content, not position: a retrain reading the
    store in another order gets the same groups."""
    from model.data.realdata import first_groups, load_source

    runs = [r.trace for r in first_groups(load_source("tau2"), 24)]
    base = _partition(group_runs(runs, [None] * len(runs)))
    for seed in range(3):
        idx = list(range(len(runs)))
        random.Random(seed).shuffle(idx)
        g = group_runs([runs[i] for i in idx], [None] * len(runs))
        assert {frozenset(idx[j] for j in p) for p in _partition(g)} == base


def test_evidence_chained_across_tasks_makes_no_lump() -> None:
    """Runs with one opening whose state read-outs chain (run i shares an answer with run i + 1) are
    joined transitively without a cap; no group holds more than ``group_max_share`` of the runs."""
    def run(i: int) -> Trace:
        steps = [Step(kind=StepKind.USER_INPUT, content="My phone has no service, please fix it.", source_index=0)]
        answers = [("get_plan", "basic"), ("get_sim", "ok"), ("get_line", f"v{i // 2}"), ("get_usage", f"u{(i + 1) // 2}")]
        for k, (tool, value) in enumerate(answers):
            steps += [Step(kind=StepKind.TOOL_CALL, tool_name=tool, tool_args={"id": "L1"}, call_id=f"c{k}",
                           source_index=2 * k + 1),
                      Step(kind=StepKind.TOOL_RESULT, tool_name=tool, content=json.dumps({"v": value}),
                           call_id=f"c{k}", source_index=2 * k + 2)]
        return Trace(steps=steps)

    runs = [run(i) for i in range(40)]
    lumped = group_runs(runs, [None] * 40, config=GroupingConfig(group_max_share=1.0))
    assert len(set(lumped)) == 1  # the chain joins everything: what the cap is for
    capped = group_runs(runs, [None] * 40)
    sizes = sorted((capped.count(g) for g in set(capped)), reverse=True)
    assert sizes[0] <= 10 and len(sizes) >= 4  # a quarter of 40
