"""Issue 31 item 7 in small: a few real runs of two agents, stripped of every name, posted to a real
``triage serve`` (uvicorn on 127.0.0.1) with one key and every default, half the tasks labelled, ``triage
retrain`` run, the other half posted (``bench/first_week.py``'s split phase, as the full bench runs it).

What must hold for a user who names nothing: every run answered, a retrain that never ends in a
traceback, every answer saying its agent was inferred, and the two configurations told apart as two
agents (before and after the retrain).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench.first_week import Phase, phase_split
from bench.first_week_input import LeakError, Run, check_stripped, read_sets, split_tasks, strip, stripped
from bench.first_week_report import agent_figures, inferred
from model.data.export_first_week import export

pytestmark = pytest.mark.slow

SETS = ("tau_airline", "agentprocessbench")
LIMIT = 6  # tasks per configuration: 24 τ-airline runs, 30 AgentProcessBench runs


@pytest.fixture(scope="module")
def sets_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sets")
    export(out, (*SETS, "whowhen", "tau2"))
    return out


@pytest.fixture(scope="module")
def runs(sets_dir: Path) -> list[Run]:
    return read_sets(sets_dir, limit=LIMIT, sets=SETS)


@pytest.fixture(scope="module")
def week(runs: list[Run], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("work")
    phase_split(work, runs, 0, None, wait=lambda s: None)
    p = Phase(work, "split0")
    return {"answers": p.answers(), "retrain": json.loads((p.dir / "retrain.json").read_text())}


def test_the_strip_leaves_nothing_that_names_the_set_or_the_label(sets_dir: Path) -> None:
    every = read_sets(sets_dir, limit=3)
    assert {r.set for r in every} == {*SETS, "whowhen", "tau2"}
    for r in every:
        p = stripped(r)
        assert isinstance(p, dict)
        assert not {"id", "task_type", "labels"} & set(p)
        assert "task_id" not in (p.get("metadata") or {})
    ww = next(r for r in every if r.set == "whowhen")
    assert isinstance(ww.trace, dict) and "mistake_agent" in ww.trace
    p = stripped(ww)
    assert isinstance(p, dict)
    assert not {"mistake_agent", "mistake_step", "mistake_reason", "ground_truth", "question_ID"} & set(p)
    # the speakers are content: they stay
    assert [m.get("name") for m in p["history"]] == [m.get("name") for m in ww.trace["history"]]
    assert any(m.get("name") for m in p["history"])


def test_the_export_names_nine_configurations_and_keys_tau2_airline_to_its_tau_scenarios(sets_dir: Path) -> None:
    every = read_sets(sets_dir)
    tau2 = Counter(r.agent for r in every if r.set == "tau2")
    assert tau2 == {"tau2_airline": 40, "tau2_telecom": 80, "tau2_telecom_solo": 80}
    tau_tasks = {r.task for r in every if r.set == "tau_airline"}
    airline = {r.task for r in every if r.agent == "tau2_airline"}
    assert len(airline) == 20 and airline <= tau_tasks  # one task, two sets


@pytest.mark.parametrize("leak", ["id", "task_id", "reward", "in_text"])
def test_the_strip_check_fails_loudly_on_a_leak(runs: list[Run], leak: str) -> None:
    r = next(x for x in runs if x.set == "tau_airline")
    p = strip(r)
    assert isinstance(p, dict)
    if leak == "id":
        p["id"] = r.original_id()
    elif leak == "task_id":
        p["metadata"] = {"task_id": r.task}
    elif leak == "reward":
        p["reward"] = 1.0
    else:
        p["messages"] = [*p["messages"], {"role": "user", "content": f"run {r.original_id()}"}]
    with pytest.raises(LeakError):
        check_stripped(r, p)


def test_half_of_each_agents_tasks_train_and_no_task_is_on_both_sides(runs: list[Run]) -> None:
    train = split_tasks(runs, 0)
    for agent in SETS:
        tasks = {r.task for r in runs if r.agent == agent}
        assert len(tasks & train) == len(tasks) // 2


def test_every_run_is_answered_and_retrain_never_ends_in_a_traceback(week: dict[str, Any], runs: list[Run]) -> None:
    answers = week["answers"]
    assert Counter(a["part"] for a in answers)["train"] + Counter(a["part"] for a in answers)["test"] == len(runs)
    assert all(a["status"] == 200 for a in answers), [a.get("error") for a in answers if a["status"] != 200]
    assert all(a.get("labelled") for a in answers if a["part"] == "train")
    r = week["retrain"]
    assert not r["traceback"], r["stderr_tail"]
    assert r["rc"] in (0, 1, 2), r


def test_every_answer_says_its_agent_was_inferred(week: dict[str, Any]) -> None:
    answers = week["answers"]
    assert all(a.get("agent") for a in answers)
    assert {a.get("agent_source") for a in answers} == {"inferred"}


def test_two_unnamed_configurations_end_as_two_agents(week: dict[str, Any]) -> None:
    fig = agent_figures(week["answers"])
    a, b = (fig["configs"][s]["largest_agent"] for s in SETS)
    assert a != b, f"both configurations in agent {a!r}"
    assert all(v["share"] >= 0.9 for v in fig["configs"].values()), fig["configs"]
    assert all(v["purity"] >= 0.95 for v in fig["agents"].values()), fig["agents"]
    # the held-out runs, posted after the retrain, land in the agent their configuration's labelled runs made
    for s in SETS:
        top = {part: Counter(inferred(a) for a in week["answers"] if a["truth"] == s and a["part"] == part)
               .most_common(1)[0][0] for part in ("train", "test")}
        assert top["train"] == top["test"], (s, top)
