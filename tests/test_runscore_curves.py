"""model.training.runscore.curves: draws by task group, the leave-one-source-out learning curve, its summary.

The data are made-up prepared runs whose answer is known: in every set a failed run's final
message hedges (run feature ``final_hedge``) and its labelled message is the one that hedges
(message feature ``hedge``), so a scorer fitted on enough runs of the other sets ranks the
held-out set perfectly and finds every labelled message.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from model.core.errors import InputError
from model.scoring.runscore.features import MESSAGE_FEATURES, RUN_FEATURES, MessageUnit
from model.scoring.runscore.model import Example
from model.training.runscore.curves import (
    draw_by_group,
    first_groups,
    learning_curve,
    render_markdown,
    summarise,
)


def _example(source: str, group: str, failed: bool, rng: np.random.Generator) -> Example:
    units = [MessageUnit(si, (si,), "agent") for si in (1, 3, 5, 7)]
    X = np.zeros((4, len(MESSAGE_FEATURES)), dtype=np.float32)
    X[:, MESSAGE_FEATURES.index("bias")] = 1.0
    X[:, MESSAGE_FEATURES.index("rel_position")] = [0.1, 0.4, 0.6, 0.9]
    X[:, MESSAGE_FEATURES.index("length_log")] = rng.uniform(0.2, 0.6, 4)
    target = None
    if failed:
        k = int(rng.integers(0, 4))
        X[k, MESSAGE_FEATURES.index("hedge")] = 1.0
        target = units[k].source_index
    run = np.zeros(len(RUN_FEATURES), dtype=np.float32)
    run[0] = 1.0
    run[RUN_FEATURES.index("messages_log")] = rng.uniform(1, 3)  # carries nothing
    # the cue of the run's probability: an evidence feature (the zero-shot recipe reads no run feature)
    cue = float(np.clip(float(failed) + rng.uniform(-0.3, 0.3), 0.0, 1.0))
    return Example(source, group, failed, target, units, X, run, 8, evidence={"clf:hallucination": cue})


def _examples(sources: dict[str, tuple[bool, ...]], groups: int = 12, seed: int = 0) -> list[Example]:
    """``groups`` task groups per set, one run per outcome listed (trials of a task)."""
    rng = np.random.default_rng(seed)
    return [_example(s, f"{s}:{g}", failed, rng) for s, outcomes in sources.items() for g in range(groups)
            for failed in (outcomes if g % 2 == 0 else outcomes[::-1])]


def test_draw_by_group_takes_whole_groups_but_the_last() -> None:
    ex = _examples({"a": (True, False, False)}, groups=10)
    picked = draw_by_group(ex, 8, np.random.default_rng(1))
    assert len(picked) == 8
    counts: dict[str, int] = {}
    for e in picked:
        counts[e.group] = counts.get(e.group, 0) + 1
    assert sorted(counts.values())[1:] == [3, 3]  # two whole groups of 3 and part of a third
    again = draw_by_group(ex, 8, np.random.default_rng(1))
    assert [id(e) for e in again] == [id(e) for e in picked]
    other = draw_by_group(ex, 8, np.random.default_rng(2))
    assert {e.group for e in other} != {e.group for e in picked}
    assert len(draw_by_group(ex, len(ex), np.random.default_rng(0))) == len(ex)
    with pytest.raises(InputError, match="got 31"):
        draw_by_group(ex, 31, np.random.default_rng(0))


def test_first_groups_keeps_the_first_groups_of_each_set() -> None:
    ex = _examples({"a": (True, False), "b": (True,)}, groups=5)
    sub = first_groups(ex, 2)
    assert [e.group for e in sub] == ["a:0", "a:0", "a:1", "a:1", "b:0", "b:1"]


def test_learning_curve_leaves_the_set_out_and_learns_the_cue() -> None:
    ex = _examples({"a": (True, False), "b": (True, False, False), "c": (True, False)})
    # the made-up cue is in the messages' content, so the attribution may use content (the shipped
    # attribution reads positions only: content did not carry across the real agents)
    points = learning_curve(ex, sizes=(4, 12, 500), seeds=(0, 1, 2), held_out=("a", "c"),
                            params={"attribution": "all"})
    for p in points:
        assert p.held_out not in p.trained_on
        assert p.n_train == p.k
    # sizes above the pool are skipped; the whole pool (b and the other set: 36 + 24 runs) is last, once
    assert sorted({(p.held_out, p.k) for p in points}) == [("a", 4), ("a", 12), ("a", 60), ("c", 4), ("c", 12),
                                                           ("c", 60)]
    full = [p for p in points if p.k == 60]
    assert len(full) == 2 and all(p.fitted for p in full)
    assert all(p.auroc == 1.0 and p.exact == 1.0 for p in full)
    assert all(0.4 < p.baseline_auroc < 0.8 for p in full)  # the length says nothing here
    rows = {(r["held_out"], r["k"]): r for r in summarise(points)}
    assert rows[("a", 60)]["auroc_sd"] == 0.0 and rows[("a", 60)]["seeds"] == 1
    assert rows[("a", 12)]["seeds"] == 3
    assert rows[("a", 12)]["auroc_min"] <= rows[("a", 12)]["auroc_mean"] <= rows[("a", 12)]["auroc_max"]
    table = render_markdown(summarise(points))
    assert "| a | 60 | 1 (0) | 1.000 ± 0.000 [1.000, 1.000] |" in table


def test_a_draw_with_no_set_of_both_outcomes_is_a_failed_fit() -> None:
    ex = _examples({"ok": (False,), "bad": (True,), "mixed": (True, False)}, groups=6)
    points = learning_curve(ex, sizes=(3,), seeds=(0, 1), held_out=("mixed",))
    assert [p.fitted for p in points] == [False, False, False]  # two draws of 3 and the whole pool
    assert all(math.isnan(p.auroc) for p in points)
    (r, r_all) = sorted(summarise(points), key=lambda r: r["k"])
    assert r["failed_fits"] == 2 and math.isnan(r["auroc_mean"])
    assert r_all["k"] == 12 and r_all["failed_fits"] == 1


def test_learning_curve_rejects_bad_arguments() -> None:
    ex = _examples({"a": (True, False), "b": (True, False)}, groups=2)
    with pytest.raises(InputError, match="held_out"):
        learning_curve(ex, held_out=("nope",))
    with pytest.raises(InputError, match="seeds"):
        learning_curve(ex, seeds=())


def test_the_airline_family_is_held_out_together() -> None:
    ex = _examples({"tau_airline": (True, False), "tau2": (True, False), "swe": (True, False)}, groups=6)
    points = learning_curve(ex, sizes=(4,), seeds=(0,))
    for p in points:
        if p.held_out in ("tau_airline", "tau2"):
            assert p.trained_on == ("swe",)  # never the other airline set
        else:
            assert set(p.trained_on) <= {"tau_airline", "tau2"}
