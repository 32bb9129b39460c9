"""The review queue's order and the queue-against-random experiment (model/training/agentmodel/queue.py), on
generated runs with a tiny learner."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from model.core.errors import InputError
from model.core.schema import Step, StepKind, Trace
from model.training.agentmodel.queue import (
    LABEL_WEIGHTS,
    Scorer,
    beats_random,
    label_weight,
    measured_best,
    order_queue,
    pooled,
    queue_markdown,
    queue_vs_random,
    uncertainty,
)
from tests.storefix import db_url  # noqa: F401  (fixture)


def test_uncertainty_peaks_at_one_half() -> None:
    assert uncertainty([0.5, 0.0, 1.0, 0.25]).tolist() == [1.0, 0.0, 0.0, 0.5]


def test_order_prefers_uncertain_runs_and_counts_a_task_once() -> None:
    # a: two uncertain near-duplicates; b: a little less uncertain; c: its task already has a label
    probs = [0.5, 0.5, 0.4, 0.45]
    assert order_queue(probs, ["a", "a", "b", "c"], labelled={"c": 1}) == [0, 2, 1, 3]
    # without the cluster rule the second run of a would come second
    assert order_queue(probs, ["a", "b", "c", "d"]) == [0, 1, 3, 2]
    # the doctest's case: a sure run of a comes after every other task
    assert order_queue([0.5, 0.9, 0.45, 0.5], ["a", "a", "b", "c"], labelled={"c": 1}) == [0, 2, 3, 1]
    # no model yet: one run of each cluster, then the second ones
    assert order_queue(None, ["a", "a", "b", "b", "c"]) == [0, 2, 4, 1, 3]
    with pytest.raises(InputError, match="one probability"):
        order_queue([0.5], ["a", "b"])


def test_label_weights() -> None:
    assert label_weight("ana", "human") == LABEL_WEIGHTS["human"]
    assert label_weight("ci", "checker") == LABEL_WEIGHTS["checker"]
    assert label_weight("outcome", "human") == LABEL_WEIGHTS["outcome"] < LABEL_WEIGHTS["human"]
    with pytest.raises(InputError, match="author_type"):
        label_weight("x", "robot")


@dataclass
class Run:
    trace: Trace
    group: str
    failed: bool


def gen_runs(seed: int, tasks: int, trials: int) -> list[Run]:
    """``tasks`` tasks, ``trials`` near-duplicate runs of each (one opening request per task); a run
    failed when its answer says "oops" (with noise: a failed run says it 3 times out of 4)."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(tasks):
        ask = f"task {t}: please look up order {1000 + t} and {rng.choice(['refund', 'change', 'cancel'])} it"
        for k in range(trials):
            failed = bool(rng.random() < 0.4)
            says = failed if rng.random() < 0.75 else not failed
            steps = [Step(kind=StepKind.USER_INPUT, content=ask, source_index=0),
                     Step(kind=StepKind.FINAL_OUTPUT, content="oops done" if says else "all done", source_index=1)]
            out.append(Run(Trace(id=f"t{t}-{k}", steps=steps), f"task{t}", failed))
    return out


def word_learner(traces: Sequence[Trace]) -> object:
    """A tiny learner: the smoothed failure rate of runs that say "oops" and of those that don't."""
    x = np.array([int("oops" in t.steps[-1].content) for t in traces])

    def fit(idx: Sequence[int], failed: np.ndarray, groups: Sequence[str]) -> Scorer:
        xi = x[list(idx)]
        rate = [(failed[xi == v].sum() + 1) / ((xi == v).sum() + 2) for v in (0, 1)]

        def score(test: Sequence[int]) -> np.ndarray:
            return np.array([rate[x[i]] for i in test], dtype=float)

        return score

    return fit


def test_queue_vs_random_measures_every_order_and_pairs_the_arms() -> None:
    runs = gen_runs(0, tasks=30, trials=6)
    d = queue_vs_random(runs, ks=(20, 30), draws=2, seed=1, folds=3, seed_labels=6, batch=4,
                        learner_factory=word_learner)  # type: ignore[arg-type]
    assert d["runs"] == 180 and d["tasks"] == 30 and d["clusters"] == 30 and d["orders"] == ["margin", "queue"]
    row = d["k"]["30"]
    assert row["units"] == 6 and set(row["orders"]) == {"margin", "queue"}
    q, m = row["orders"]["queue"], row["orders"]["margin"]
    assert len(q["diffs"]) == len(m["diffs"]) == 6
    # near-duplicates count once: the queue's 30 runs cover more of the ~20 training tasks than random's
    # and than margin's (which ignores the tasks)
    assert q["tasks"] > row["random_tasks"] and q["tasks"] >= 19 and q["tasks"] > m["tasks"]
    for r in (q, m):
        assert r["ci"][0] <= r["diff"] <= r["ci"][1]
        assert abs(r["diff"] - (r["auroc"] - row["random"])) < 1e-3
    md = queue_markdown({"generated": d})
    assert "| generated | 180 (30, 30) | 30 | margin |" in md and "| generated | 180 (30, 30) | 30 | queue |" in md
    assert "| margin | " in md and "(1 sets)" in md


def test_decision_needs_the_whole_interval_above_zero() -> None:
    def res(margin: list[float], queue: list[float]) -> dict[str, object]:
        return {"a": {"k": {"50": {"orders": {"margin": {"diffs": margin}, "queue": {"diffs": queue}}}}}}

    ahead = res([0.05, -0.04, 0.06, -0.05], [0.02, 0.03, 0.04, 0.05])
    assert beats_random(ahead, "queue", 50) and not beats_random(ahead, "margin", 50)  # type: ignore[arg-type]
    assert measured_best(ahead) == "queue"  # type: ignore[arg-type]
    both = res([0.05, 0.06, 0.07, 0.06], [0.02, 0.03, 0.04, 0.05])
    assert measured_best(both) == "margin"  # type: ignore[arg-type]  (both above: the larger mean)
    behind = res([0.05, -0.04, 0.06, -0.05], [-0.02, -0.03, 0.04, -0.05])
    assert measured_best(behind) == "random"  # type: ignore[arg-type]
    assert pooled(ahead, 50, "queue")["diff"] == pytest.approx(0.035)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="K = 25"):
        pooled(ahead, 25)  # type: ignore[arg-type]


def test_the_default_order_is_the_measured_best() -> None:
    """``DEFAULT_ORDER`` is what reports/learning.json's queue section decides at K = 50."""
    import json

    from serve.services.label_queue import DEFAULT_ORDER, ORDERS

    rep = json.loads((Path(__file__).parent.parent / "reports" / "learning.json").read_text(encoding="utf-8"))
    section = rep["sections"]["queue"]
    assert measured_best(section, 50) == DEFAULT_ORDER
    assert set(ORDERS) == {"random", *next(iter(section.values()))["orders"]}


def test_bad_arguments() -> None:
    runs = gen_runs(0, tasks=6, trials=2)
    with pytest.raises(InputError, match="seed_labels"):
        queue_vs_random(runs, draws=1, seed_labels=1, learner_factory=word_learner)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="one cluster per run"):
        queue_vs_random(runs, ks=(4,), draws=1, learner_factory=word_learner, clusters=["a"])  # type: ignore[arg-type]


class _History:
    """The one store method the review queue reads, over records in memory."""

    def __init__(self, records: list[dict[str, object]]) -> None:
        self.records = records

    def iter_history(self, tenant: str | None = None) -> list[dict[str, object]]:
        return self.records


def _record(trace_id: str, ask: str, p: float, minute: int, labels: list[dict[str, object]] | None = None,
            task_id: str | None = None) -> dict[str, object]:
    t = Trace(id=trace_id, steps=[Step(kind=StepKind.USER_INPUT, content=ask, source_index=0),
                                  Step(kind=StepKind.FINAL_OUTPUT, content="done", source_index=1)],
              metadata={"task_id": task_id} if task_id else {})
    return {"trace": t.model_dump(mode="json"), "response": {"failure_probability": p, "failures": [], "signals": []},
            "created_at": datetime(2026, 12, 4, 12, minute, tzinfo=UTC), "labels": labels or []}


def test_store_review_in_queue_order_counts_near_duplicates_once() -> None:
    from serve.services.label_queue import ORDERS, review_queue

    ask_a = "please refund order 1234 for the customer named Ana Lima, the blue shoes were too small"
    records = [
        _record("a1", ask_a, 0.51, 1),
        _record("a2", ask_a + " thanks", 0.52, 2),  # a near-duplicate of a1's request
        _record("b", "book a flight from Lisbon to Porto next Monday morning in economy class", 0.55, 3),
        _record("c", "cancel my hotel booking in Madrid for the fifth of January please", 0.50, 4,
                task_id="t-c"),
        _record("c-done", "something else entirely", 0.9, 5, task_id="t-c",
                labels=[{"author": "bob", "failed": True}]),
    ]
    store = _History(records)
    margin_order, _ = review_queue(store, "local", author="ana", threshold_for=lambda _: 0.5,  # type: ignore[arg-type]
                                   order="margin")
    assert [c.trace_id for c in margin_order] == ["c", "a1", "a2", "b", "c-done"]
    queue, done = review_queue(store, "local", author="ana", threshold_for=lambda _: 0.5,  # type: ignore[arg-type]
                               order="queue")
    # a2 repeats a1's task and c's task has a label already: b comes before them
    assert [c.trace_id for c in queue] == ["a1", "b", "c", "a2", "c-done"] and done == 0
    assert "queue" in ORDERS
    with pytest.raises(InputError, match="order must be one of random, margin, queue; got 'bogus'"):
        review_queue(store, "local", author="ana", threshold_for=lambda _: 0.5, order="bogus")  # type: ignore[arg-type]


def test_random_order_is_seeded_by_the_reviewer_and_stable_as_runs_are_labelled() -> None:
    from serve.services.label_queue import random_key, review_queue

    records = [_record(f"r{i}", f"request number {i} about something {i * 7}", 0.5 + i / 100, i % 50)
               for i in range(12)]
    store = _History(records)

    def ids(author: str) -> list[str]:
        got, _ = review_queue(store, "local", author=author, threshold_for=lambda _: 0.5,  # type: ignore[arg-type]
                              order="random")
        return [c.trace_id for c in got]

    ana = ids("ana")
    assert ana == ids("ana") == sorted(ana, key=lambda t: random_key("ana", t))  # the same page twice
    assert sorted(ana) == sorted(f"r{i}" for i in range(12))
    assert ids("bob") != ana  # another reviewer, another order (12! orders: equal by chance ~never)
    assert ana != [f"r{i}" for i in range(12)] and ana != [c.trace_id for c in review_queue(
        store, "local", author="ana", threshold_for=lambda _: 0.5, order="margin")[0]]  # type: ignore[arg-type]
    # ana labels her second run: it leaves her queue and the rest keep their order
    records[int(ana[1][1:])]["labels"] = [{"author": "ana", "failed": True}]
    assert ids("ana") == [t for t in ana if t != ana[1]]


def test_store_review_queue_order_on_a_real_store(db_url: str, tmp_path: Path) -> None:  # noqa: F811
    from model.core.options import DiagnoseOptions
    from model.data.builder import make_trace
    from model.diagnosis.diagnoser import Diagnoser
    from serve.schemas import LabelRequest
    from serve.services.label_queue import review_queue
    from serve.settings import Settings
    from serve.wiring import build_service, load_runscorer

    settings = Settings(database_url=db_url, data_dir=tmp_path / "data")
    service = build_service(settings, Diagnoser(runscorer=load_runscorer(settings)))
    try:
        for n, kind in enumerate(["loop", None, "tool_error", None]):
            trace = make_trace(kind, seed=10 + n, n_steps=8)
            trace.id = f"run-{n}"
            trace.metadata["task_id"] = "same" if n < 3 else "other"
            service.diagnose("local", trace, DiagnoseOptions())
        service.add_label("local", "run-0", LabelRequest(failed=True, author="bob"))
        # (written when margin was the default order; since random is, it matched by the luck of the hash)
        by_margin, _ = review_queue(service.stores.labels, "local", author="ana", threshold_for=lambda _: 0.5,
                                    order="margin")
        queue, done = review_queue(service.stores.labels, "local", author="ana", threshold_for=lambda _: 0.5,
                                   order="queue")
        assert done == 0 and sorted(c.trace_id for c in queue) == sorted(c.trace_id for c in by_margin)
        # task "same" has a labelled run (run-0, by bob): the one run of task "other" leads the queue
        # unless a run of "same" is more than twice as uncertain
        first_same = next(c for c in queue if c.trace_id != "run-3")
        other = next(c for c in queue if c.trace_id == "run-3")
        if (1 - 2 * first_same.margin) / 2 < 1 - 2 * other.margin:
            assert queue[0].trace_id == "run-3"
        assert [c.trace_id for c in queue if c.trace_id != "run-3"] == [
            c.trace_id for c in by_margin if c.trace_id != "run-3"]
    finally:
        service.stores.db.dispose()


def test_agent_model_learner_learns_the_planted_word() -> None:
    from model.training.agentmodel.queue import agent_model_learner

    runs = gen_runs(3, tasks=40, trials=2)
    traces = [r.trace for r in runs]
    y = np.array([int(r.failed) for r in runs])
    fit = agent_model_learner(traces)
    train, test = list(range(0, 60)), list(range(60, 80))
    s = fit(train, y[train], [runs[i].group for i in train])(test)
    from model.core.metrics import auroc

    assert s.shape == (20,) and ((s >= 0) & (s <= 1)).all()
    assert auroc(y[test], s) > 0.7  # "oops" says failed 3 times out of 4
