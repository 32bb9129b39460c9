"""Splits: grouped by template and session, whole families held out, every split covered."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from model.core.errors import InputError
from model.core.schema import Trace
from model.data.datagen import GenerateConfig, generate, write_jsonl
from model.data.splits import SPLITS, SplitConfig, check_disjoint, group_of, run, sample_steps, split_traces


@cache
def _traces() -> tuple[Trace, ...]:
    return tuple(generate(GenerateConfig(n_traces=900, seed=21)))


def test_no_template_or_session_in_two_splits_and_families_held_out() -> None:
    cfg = SplitConfig(heldout_families=["calendar", "sql_analytics"])
    parts = split_traces(list(_traces()), cfg)
    assert sum(len(v) for v in parts.values()) == len(_traces())
    check_disjoint(parts)
    owner: dict[str, str] = {}
    for name, ts in parts.items():
        for t in ts:
            assert t.labels is not None
            for key in (f"t:{t.labels.provenance['template']}", f"s:{t.session_id}"):
                assert owner.setdefault(key, name) == name, key
    assert {t.task_type for t in parts["heldout_families"]} == {"calendar", "sql_analytics"}
    for name in ("train", "val", "test"):
        assert not {t.task_type for t in parts[name]} & {"calendar", "sql_analytics"}
        assert {t.language for t in parts[name]} == {"en", "zh"}, name
    # shares land near the configured fractions (whole templates move, so not exactly)
    rest = len(_traces()) - len(parts["heldout_families"])
    assert 0.1 < len(parts["test"]) / rest < 0.35
    assert 0.4 < len(parts["train"]) / rest < 0.85


def test_check_disjoint_catches_a_leak() -> None:
    ts = list(_traces())[:2]
    with pytest.raises(AssertionError, match="group"):
        check_disjoint({"train": [ts[0]], "test": [ts[0]]})
    assert group_of(ts[1]).startswith("template:")


def test_split_stage_writes_files_and_summary(tmp_path: Path) -> None:
    labelled = tmp_path / "labelled.jsonl"
    write_jsonl(iter(_traces()), labelled)
    params = tmp_path / "params.yaml"
    params.write_text("split:\n  heldout_families: [weather]\n  seed: 5\n", encoding="utf-8")
    res = run(params, labelled, tmp_path / "splits")
    for name in SPLITS:
        lines = (tmp_path / "splits" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        assert len(lines) == res["splits"][name]["traces"]
        if lines:
            t = Trace.model_validate_json(lines[0])
            assert t.labels is not None and t.labels.provenance["template"]
    summary = json.loads((tmp_path / "splits" / "summary.json").read_text(encoding="utf-8"))
    assert summary["total"]["traces"] == 900
    assert summary["splits"]["heldout_families"]["families"] == {"weather": res["splits"]["heldout_families"]["traces"]}


def test_bad_split_config() -> None:
    with pytest.raises(InputError, match="val_fraction"):
        SplitConfig(val_fraction=0.6, test_fraction=0.5)
    with pytest.raises(InputError, match="step_samples"):
        SplitConfig(step_samples={"dev": 3})


def test_sample_steps_balances_kinds() -> None:
    ts = list(_traces())
    sample = sample_steps(ts, 800, seed=1)
    assert len(sample) == 800
    assert sample == sample_steps(ts, 800, seed=1)
    pos = [k for _, _, ks in sample for k in ks]
    assert len(set(pos)) == 16  # every kind of the classifier plus disallowed_tool
    neg = [x for x in sample if not x[2]]
    assert 300 <= len(neg) <= 500
    for ti, si, kinds in sample:
        labels = ts[ti].labels
        assert labels is not None
        assert sorted(kinds) == sorted(f.kind.value for f in labels.failures if f.step == si)
