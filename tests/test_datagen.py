"""The trace generator: determinism, coverage, labels at the right steps (checked by the rules)."""

from __future__ import annotations

import json
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from model.core.errors import InputError
from model.core.kinds import FailureKind
from model.core.schema import StepKind, Trace
from model.data.datagen import FAMILIES, GenerateConfig, generate, make_one, read_jsonl, summary, write_jsonl
from model.detectors.catalog import make_detector
from model.importers import read_path


@cache
def _traces(n: int = 700, seed: int = 11) -> tuple[Trace, ...]:
    return tuple(generate(GenerateConfig(n_traces=n, seed=seed)))


def test_same_seed_same_traces_and_any_index_alone() -> None:
    cfg = GenerateConfig(n_traces=40, seed=3)
    a = [t.model_dump_json() for t in generate(cfg)]
    b = [t.model_dump_json() for t in generate(cfg)]
    assert a == b
    assert make_one(cfg, 17).model_dump_json() == a[17]
    other = [t.model_dump_json() for t in generate(GenerateConfig(n_traces=40, seed=4))]
    assert sum(x != y for x, y in zip(a, other, strict=True)) == 40


def test_every_kind_in_both_languages_and_every_family() -> None:
    s = summary(list(_traces(1500, 5)))
    wanted = {k.value for k in FailureKind if k not in (FailureKind.DEGRADATION, FailureKind.AT_RISK)}
    assert set(s["kinds_traces"]) == wanted
    for k in wanted:
        assert s["kinds_by_language"][k].get("en", 0) > 0 and s["kinds_by_language"][k].get("zh", 0) > 0, k
    assert set(s["families"]) == set(FAMILIES)
    assert s["length"]["min"] <= 4 and s["length"]["max"] >= 60
    assert 0.2 < s["healthy"] / s["traces"] < 0.4


def test_labels_point_at_consistent_steps() -> None:
    for t in _traces():
        assert t.labels is not None and t.language in ("en", "zh") and t.task_type in FAMILIES
        prov = t.labels.provenance
        assert prov["family"] == t.task_type and prov["template"].startswith(t.task_type + ".")
        steps = [f.step for f in t.labels.failures]
        assert t.labels.first_failing_step == (min(steps) if steps else None)
        for f in t.labels.failures:
            assert f.step is not None and f.source_index == t.steps[f.step].source_index
        calls = {s.call_id for s in t.steps if s.kind is StepKind.TOOL_CALL}
        for s in t.steps:
            if s.kind is StepKind.TOOL_RESULT:
                assert s.call_id in calls
        srcs = [s.source_index for s in t.steps]
        assert srcs == sorted(srcs) and srcs[0] == 0


# Where each kind's label must sit (the step kind), matching the rule detectors' conventions.
_AT = {
    "tool_error": {StepKind.TOOL_RESULT}, "timeout": {StepKind.TOOL_RESULT}, "rate_limited": {StepKind.TOOL_RESULT},
    "provider_error": {StepKind.ERROR}, "malformed_call": {StepKind.TOOL_CALL},
    "disallowed_tool": {StepKind.TOOL_CALL}, "loop": {StepKind.TOOL_RESULT},
    "ignored_error": {StepKind.FINAL_OUTPUT}, "hallucination": {StepKind.FINAL_OUTPUT},
    "off_topic": {StepKind.FINAL_OUTPUT}, "refusal": {StepKind.FINAL_OUTPUT},
    "empty_response": {StepKind.FINAL_OUTPUT, StepKind.LLM_OUTPUT},
    "unsafe_output": {StepKind.FINAL_OUTPUT, StepKind.LLM_OUTPUT},
    "context_loss": {StepKind.FINAL_OUTPUT, StepKind.TOOL_CALL, StepKind.LLM_OUTPUT},
    "assumption_violated": {StepKind.FINAL_OUTPUT, StepKind.TOOL_CALL, StepKind.LLM_OUTPUT},
    "incomplete": {StepKind.TOOL_RESULT, StepKind.TOOL_CALL, StepKind.LLM_REASONING, StepKind.ERROR},
}


def test_label_step_kinds() -> None:
    for t in _traces():
        assert t.labels is not None
        for f in t.labels.failures:
            assert t.steps[f.step or 0].kind in _AT[f.kind.value], (t.id, f)
            if f.kind is FailureKind.INCOMPLETE:
                assert f.step == len(t.steps) - 1
                assert all(s.kind is not StepKind.FINAL_OUTPUT for s in t.steps)


# Kinds a rule detector must find at exactly the labelled step, every time.
EXACT = ("tool_error", "timeout", "rate_limited", "provider_error", "malformed_call", "empty_response",
         "incomplete", "refusal", "loop", "disallowed_tool")
# Kinds whose rule reads wording, so a fluent failure can slip past it now and then: a refund
# declined "by policy" (很抱歉……无法退款) after a failed lookup reads like an acknowledgement to the
# ignored_error rule; a SQL NULL sum or a terminal's "0 nan" is not empty to the assumption rule.
MOSTLY = {"ignored_error": 0.1, "assumption_violated": 0.25}


def _findings(t: Trace, name: str) -> set[int]:
    params = {"allowed_tools": t.metadata["allowed_tools"]} if name == "disallowed_tool" else {}
    return {f.step for f in make_detector(name, **params).inspect(t) if f.step is not None}


@pytest.mark.slow
def test_rules_find_every_injected_failure_at_its_step() -> None:
    missed: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    for t in _traces():
        assert t.labels is not None
        by_kind: dict[str, set[int]] = {}
        for f in t.labels.failures:
            by_kind.setdefault(f.kind.value, set()).add(f.step or 0)
        for kind, steps in by_kind.items():
            if kind not in EXACT and kind not in MOSTLY:
                continue
            found = _findings(t, kind)
            if kind == "loop":
                steps = {min(steps)}  # the rule reports the 3rd repeat; later repeats are labelled too
            for s in steps:
                seen[kind] += 1
                if s not in found:
                    missed[kind] += 1
    for kind in EXACT:
        assert seen[kind] >= 15, kind
        assert missed[kind] == 0, f"{kind}: rule missed {missed[kind]} of {seen[kind]} labelled steps"
    for kind, share in MOSTLY.items():
        assert seen[kind] >= 15, kind
        assert missed[kind] <= share * seen[kind], f"{kind}: rule missed {missed[kind]} of {seen[kind]}"


def test_healthy_traces_include_hard_negatives_without_labels() -> None:
    variants = Counter(t.labels.provenance["variant"] for t in _traces() if t.labels and t.labels.healthy)
    assert {"honest_empty", "polling", "self_correction", "long_productive"} <= set(variants)
    for t in _traces():
        assert t.labels is not None
        if t.labels.provenance["variant"] == "polling":
            # the same status call repeated while the job progresses is not a loop
            assert not _findings(t, "loop")


def test_labels_survive_a_round_trip(tmp_path: Path) -> None:
    ts = list(_traces())[:50]
    p = tmp_path / "t.jsonl"
    assert write_jsonl(iter(ts), p) == 50
    back = list(read_jsonl(p))
    assert [t.model_dump() for t in back] == [t.model_dump() for t in ts]
    # through the native importer too (what `triage datasets import` and the label stage read)
    again = read_path(p, format="native")
    assert [t.labels for t in again] == [t.labels for t in ts]
    one = tmp_path / "one.json"
    one.write_text(ts[3].model_dump_json(), encoding="utf-8")
    assert read_path(one)[0].labels == ts[3].labels


def test_bad_config_and_bad_file_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="generate.families"):
        GenerateConfig(families={"nope": 1.0})
    with pytest.raises(InputError, match="unknown keys"):
        GenerateConfig.from_params({"n_trace": 3})
    p = tmp_path / "bad.jsonl"
    p.write_text(_traces()[0].model_dump_json() + "\n{not json\n", encoding="utf-8")
    with pytest.raises(InputError) as exc:
        list(read_jsonl(p))
    assert exc.value.line == 2


def test_generate_stage_writes_traces_and_summary(tmp_path: Path) -> None:
    from model.data.datagen.__main__ import main

    params = tmp_path / "params.yaml"
    params.write_text("generate:\n  n_traces: 30\n  seed: 2\n", encoding="utf-8")
    out = tmp_path / "gen" / "traces.jsonl"
    assert main(["--params", str(params), "--out", str(out)]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 30
    assert json.loads((out.parent / "summary.json").read_text(encoding="utf-8"))["traces"] == 30


def test_docstring_examples() -> None:
    import doctest

    import model.data.datagen
    import model.data.datagen.generator
    import model.data.splits

    for mod in (model.data.datagen, model.data.datagen.generator, model.data.splits):
        assert doctest.testmod(mod).failed == 0, mod.__name__
