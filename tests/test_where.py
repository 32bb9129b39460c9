"""The learned attribution (model/training/agentmodel/where.py) on generated runs with known failing messages."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from model.core.errors import InputError, NotFittedError
from model.core.schema import Step, StepKind, Trace
from model.training.agentmodel.where import (
    WhereModel,
    choose_fixed,
    fixed_row,
    localisation_curve,
    localisation_markdown,
    messages,
)

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"]


def gen_run(rng: np.random.Generator, *, n: int, fail_at: int, cue: bool) -> Trace:
    """A user question, then ``n`` assistant / tool-result pairs; the assistant message at pair
    ``fail_at`` is the failing one; with ``cue`` it says "guessing the figure" (its content tells)."""
    steps = [Step(kind=StepKind.SYSTEM, content="be helpful", source_index=0),
             Step(kind=StepKind.USER_INPUT, content="find the figure", source_index=1)]
    si = 2
    for k in range(n):
        text = " ".join(rng.choice(WORDS, 6))
        if cue and k == fail_at:
            text += " guessing the figure without checking"
        steps.append(Step(kind=StepKind.LLM_OUTPUT, content=text, source_index=si, speaker="Planner"))
        steps.append(Step(kind=StepKind.TOOL_RESULT, content=" ".join(rng.choice(WORDS, 5)), tool_name="lookup",
                          source_index=si + 1))
        si += 2
    return Trace(id=f"r{rng.integers(1 << 30)}", steps=steps)


def fail_si(fail_at: int) -> int:
    return 2 + 2 * fail_at


@dataclass
class Run:
    trace: Trace
    group: str
    failed: bool
    fail_source_index: int | None


def content_runs(seed: int, n_runs: int) -> list[Run]:
    """The failing message sits anywhere; only its content tells."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_runs):
        n = int(rng.integers(5, 9))
        at = int(rng.integers(0, n))
        out.append(Run(gen_run(rng, n=n, fail_at=at, cue=True), f"task{i // 2}", True, fail_si(at)))
    return out


def test_messages_skip_system_steps() -> None:
    t = gen_run(np.random.default_rng(0), n=3, fail_at=0, cue=False)
    assert [m.source_index for m in messages(t)] == [1, 2, 3, 4, 5, 6, 7]


def test_position_prior_alone_finds_a_fixed_position() -> None:
    rng = np.random.default_rng(1)
    traces = [gen_run(rng, n=int(rng.integers(4, 8)), fail_at=1, cue=False) for _ in range(30)]
    m = WhereModel(content=False).fit(traces, [fail_si(1)] * 30, [f"g{i}" for i in range(30)])
    test = gen_run(rng, n=6, fail_at=1, cue=False)
    si, p = m.locate(test)
    assert si == fail_si(1)
    assert 0 < p <= 1
    assert m.l2_content_ is None


def test_content_finds_what_position_cannot() -> None:
    train, test = content_runs(2, 60), content_runs(3, 30)
    learned = WhereModel().fit([r.trace for r in train], [r.fail_source_index for r in train],
                               [r.group for r in train])
    prior = WhereModel(content=False).fit([r.trace for r in train], [r.fail_source_index for r in train],
                                          [r.group for r in train])
    hit_l = np.mean([learned.locate(r.trace)[0] == r.fail_source_index for r in test])
    hit_p = np.mean([prior.locate(r.trace)[0] == r.fail_source_index for r in test])
    assert hit_l >= 0.9
    assert hit_p <= 0.4


def test_round_trip_keeps_every_probability() -> None:
    train = content_runs(4, 20)
    m = WhereModel().fit([r.trace for r in train], [r.fail_source_index for r in train], [r.group for r in train])
    back = WhereModel.from_dict(json.loads(json.dumps(m.to_dict())))
    for r in content_runs(5, 5):
        a, b = m.probabilities(r.trace), back.probabilities(r.trace)
        assert [s for s, _ in a] == [s for s, _ in b]
        assert np.allclose([p for _, p in a], [p for _, p in b], atol=1e-12)


def test_errors_say_what_to_do() -> None:
    with pytest.raises(NotFittedError, match="call fit"):
        WhereModel().locate(content_runs(0, 1)[0].trace)
    with pytest.raises(InputError, match="one entry per run"):
        WhereModel().fit([content_runs(0, 1)[0].trace], [], ["g"])
    with pytest.raises(InputError, match="no run has its labelled failing message"):
        WhereModel().fit([content_runs(0, 1)[0].trace], [999], ["g"])
    with pytest.raises(InputError, match="format"):
        WhereModel.from_dict({"format": "where", "format_version": 0})


def test_fixed_rows() -> None:
    assert fixed_row("first+2", 5) == 2 and fixed_row("first+9", 5) == 4
    assert fixed_row("last-0", 5) == 4 and fixed_row("last-9", 5) == 0
    assert fixed_row("relative 0.5", 5) == 2


def test_fixed_position_is_chosen_on_the_runs_given() -> None:
    from model.scoring.agentmodel.where import prepare as _prepare

    rng = np.random.default_rng(6)
    items = [_prepare(gen_run(rng, n=int(rng.integers(4, 8)), fail_at=2, cue=False), fail_si(2), f"g{i}")
             for i in range(10)]
    # the failing message is the 6th candidate (user, then pairs 0, 1; then the third assistant message)
    assert choose_fixed(items) == "first+5"


def test_localisation_curve_reports_the_gain_of_content() -> None:
    d = localisation_curve(content_runs(7, 40), k=24, draws=1, seed=0)
    assert d["labelled_runs"] == 40 and d["tasks"] == 20
    assert d["train_runs_mean"] == 24
    gain = d["gains"]["learned − position prior"]["exact"]
    assert gain["mean"] > 0.3 and gain["ci"][0] > 0
    assert d["methods"]["learned"]["exact"]["ci"][0] <= d["methods"]["learned"]["exact"]["mean"]
    md = localisation_markdown({"generated": d})
    assert "gain learned − fixed position" in md and "| learned |" in md


def test_localisation_curve_needs_enough_tasks() -> None:
    with pytest.raises(InputError, match="at least 5 tasks"):
        localisation_curve(content_runs(8, 4), k=10, draws=1)
