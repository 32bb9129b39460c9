"""Labelling functions, the label model and the label stage (generated pass-through, weak labels,
human labels win)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model.core.errors import NotFittedError
from model.core.kinds import FailureKind
from model.core.schema import LabelSource
from model.data.builder import make_trace
from model.data.datagen import GenerateConfig, generate, read_jsonl, write_jsonl
from model.data.labelling import HumanLabel, HumanLabelStore, LabelModel, Vote, apply_lfs, import_logs
from model.data.labelling.stage import LabelConfig, run


@pytest.mark.parametrize("kind", ["tool_error", "timeout", "rate_limited", "refusal", "loop", "empty_response"])
def test_rule_lfs_vote_at_the_labelled_step(kind: str) -> None:
    t = make_trace(kind, seed=4, n_steps=9)
    assert t.labels is not None
    step = next(f.step for f in t.labels.failures if f.kind.value == kind)
    votes = apply_lfs(t)
    assert any(v.lf == kind and v.step == step and v.kind.value == kind for v in votes)


def test_heuristic_lfs_add_independent_votes() -> None:
    t = make_trace("timeout", seed=2)
    lfs = {v.lf for v in apply_lfs(t) if v.kind is FailureKind.TIMEOUT}
    assert {"timeout", "status_fields", "text_patterns"} <= lfs


def _votes(agree: int, alone: int) -> list[list[Vote]]:
    te = FailureKind.TOOL_ERROR
    out = [[Vote(lf, te, 3, 3, 0.9) for lf in ("tool_error", "status_fields", "text_patterns")] for _ in range(agree)]
    out += [[Vote("text_patterns", te, 5, 5, 0.6)] for _ in range(alone)]
    return out


def test_label_model_weighs_agreement() -> None:
    with pytest.raises(NotFittedError, match="fit"):
        LabelModel().predict([])
    votes = _votes(60, 15)
    lm = LabelModel().fit(votes)
    both = lm.predict(votes[0])
    assert [(w.kind, w.step) for w in both] == [(FailureKind.TOOL_ERROR, 3)]
    assert both[0].confidence > 0.95 and both[0].votes == ("status_fields", "text_patterns", "tool_error")
    lone = lm.predict(votes[-1])
    assert all(w.confidence < 0.5 for w in lone)  # one of three covering LFs: below threshold, dropped
    rates = lm.describe()["rates"]["tool_error"]
    assert rates["tool_error"][0] > rates["text_patterns"][0] - 0.05
    maj = LabelModel(method="majority").fit(votes)
    assert maj.predict(votes[0])[0].confidence == 1.0
    assert maj.predict(votes[-1]) == []  # 1 of 3 < 0.5


def _openai_log(path: Path, error: bool) -> None:
    msgs = [
        {"role": "user", "content": "What's the weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "c1",
         "content": "HTTP 503 Service Unavailable: upstream failed" if error else "{\"temp_c\": 4}"},
        {"role": "assistant", "content": "It is 4 °C in Oslo."},
    ]
    path.write_text(json.dumps({"messages": msgs}), encoding="utf-8")


def test_label_stage(tmp_path: Path) -> None:
    gen = tmp_path / "generated.jsonl"
    generated = list(generate(GenerateConfig(n_traces=25, seed=8)))
    write_jsonl(iter(generated), gen)
    logs = tmp_path / "logs"
    logs.mkdir()
    _openai_log(logs / "a.json", error=True)
    _openai_log(logs / "b.json", error=False)
    _openai_log(logs / "c.json", error=True)
    raw = tmp_path / "raw"
    rec, added = import_logs(logs, raw)
    assert added and rec.traces == 3
    human = tmp_path / "human.jsonl"
    # the human says c.json's run is healthy (e.g. the error was expected)
    HumanLabelStore(human).append(HumanLabel(f"raw-{rec.id}-c.json-0", []))
    # and relabels a generated trace
    HumanLabelStore(human).append(HumanLabel(generated[0].id, [(FailureKind.OFF_TOPIC, 1)]))
    cfg = LabelConfig(raw_dir=str(raw), human_labels=str(human))
    out = tmp_path / "labelled" / "traces.jsonl"
    s = run(cfg, gen, out)
    assert (s["generated"], s["imported"], s["human"]) == (25, 3, 2)
    back = {t.id: t for t in read_jsonl(out)}
    for t in generated[1:]:
        assert back[t.id].labels == t.labels  # generated ground truth passes through
    g0 = back[generated[0].id].labels
    assert g0 is not None and g0.source is LabelSource.HUMAN
    assert [(f.kind, f.step, f.source) for f in g0.failures] == [(FailureKind.OFF_TOPIC, 1, LabelSource.HUMAN)]
    assert g0.provenance["replaced"]["source"] == "generated"
    a = back[f"raw-{rec.id}-a.json-0"].labels
    assert a is not None and a.source is LabelSource.RULE_VOTE
    te = [f for f in a.failures if f.kind is FailureKind.TOOL_ERROR]
    assert [(f.step, f.source_index, f.source) for f in te] == [(2, 2, LabelSource.RULE_VOTE)]
    assert 0.5 <= te[0].confidence <= 1.0
    assert {v["lf"] for v in a.provenance["votes"]} >= {"tool_error", "text_patterns"}
    b = back[f"raw-{rec.id}-b.json-0"].labels
    assert b is not None and b.healthy
    c = back[f"raw-{rec.id}-c.json-0"].labels
    assert c is not None and c.source is LabelSource.HUMAN and c.healthy
    assert back[f"raw-{rec.id}-a.json-0"].language == "en"
    assert json.loads((out.parent / "summary.json").read_text(encoding="utf-8"))["sources"]["human"] == 1


def test_raw_files_are_checked_against_the_manifest(tmp_path: Path) -> None:
    from model.core.errors import InputError
    from model.data.labelling import load_raw

    logs = tmp_path / "logs"
    logs.mkdir()
    _openai_log(logs / "a.json", error=False)
    rec, _ = import_logs(logs, tmp_path / "raw")
    f = tmp_path / "raw" / rec.id / "a.json"
    f.chmod(0o644)
    f.write_text(f.read_text(encoding="utf-8").replace("Oslo", "Bergen"), encoding="utf-8")
    with pytest.raises(InputError, match="changed since import"):
        load_raw(tmp_path / "raw")


def test_docstring_examples() -> None:
    import doctest

    import model.data.labelling
    import model.data.labelling.labelmodel

    for mod in (model.data.labelling, model.data.labelling.labelmodel):
        assert doctest.testmod(mod).failed == 0, mod.__name__
