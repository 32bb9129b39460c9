"""The closed-loop bench at tiny size: its world, its baselines, and one run of every mode against a
real ``triage serve`` (bench/closed_loop.py; the figures are the bench's, not these tests')."""

from __future__ import annotations

import json
import lzma
import re
from pathlib import Path

import pytest

from bench.closed_loop import STEP_CAP, main, run_plain, tasks_for
from bench.faults import (
    FAULTS,
    INJECTIONS,
    PET_CONSTRAINTS,
    FaultPlan,
    FaultyTools,
    ToolHTTPError,
    VirtualClock,
)
from bench.standin_llm import FAMILY_TOOLS, ScriptedModel, make_task

ROOT = Path(__file__).resolve().parent.parent


def test_tasks_cover_every_fault_and_are_fixed_by_the_seed() -> None:
    tasks = tasks_for(len(FAULTS) * 2, seed=3)
    assert {t.fault.fault for t in tasks} == set(FAULTS)
    again = tasks_for(len(FAULTS) * 2, seed=3)
    assert [(t.user, t.expected) for t in tasks] == [(t.user, t.expected) for t in again]
    assert [t.user for t in tasks_for(len(FAULTS) * 2, seed=4)] != [t.user for t in tasks]


def test_the_stand_in_reads_only_the_messages() -> None:
    task = make_task(0, "none", 0)
    model = ScriptedModel(task)
    messages = [{"role": "user", "content": task.user}]
    first = model(messages)
    assert first["tool_calls"][0]["function"]["name"] == FAMILY_TOOLS[task.family][0]
    assert ScriptedModel(task)(messages)["tool_calls"][0]["function"] == first["tool_calls"][0]["function"]
    # a failed call with no instruction after it: it gives up and tells the user
    failed = [*messages, first, {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"],
                                 "content": "Error: HTTP 503 Service Unavailable", "status": "error"}]
    assert ScriptedModel(task)(failed)["content"].startswith("I'm sorry, I couldn't")


def test_tool_wrappers_inject_the_planned_faults() -> None:
    clock = VirtualClock()
    tools = FaultyTools(FaultPlan("rate_limited_429", tool="get_weather", retry_after=6.0), clock)
    with pytest.raises(ToolHTTPError) as err:
        tools.call("get_weather", {"city": "Cork", "date": "2026-05-10"})
    assert err.value.status == 429 and err.value.retry_after == 6.0 and "Retry-After: 6" in str(err.value)
    clock.sleep(6.0)
    assert '"high_c"' in tools.call("get_weather", {"city": "Cork", "date": "2026-05-10"})
    with pytest.raises(ToolHTTPError, match="nights must be integer"):
        tools.call("search_hotels", {"city": "Cork", "checkin": "2026-05-10", "nights": "2 nights"})


@pytest.mark.parametrize(
    ("fault", "no_repair", "blind_retry", "retry_fallback"),
    [
        ("none", True, True, True),
        ("transient_5xx", False, True, True),
        ("tool_down_alt", False, False, False),
        ("empty_needed", False, False, False),
    ],
)
def test_baselines(fault: str, no_repair: bool, blind_retry: bool, retry_fallback: bool) -> None:
    task = make_task(1, fault, 0)
    got = [run_plain(task, m).success for m in ("no_repair", "blind_retry", "retry_fallback")]
    assert got == [no_repair, blind_retry, retry_fallback]


def test_a_provider_outage_needs_the_fallback_model_and_a_loop_hits_the_cap() -> None:
    outage = next(t for i in range(40) if (t := make_task(i, "provider_error", 0)).fault.failures == 0)
    assert [run_plain(outage, m).success for m in ("no_repair", "blind_retry", "retry_fallback")] == [
        False, False, True]
    loop = run_plain(make_task(0, "loop_search", 0), "blind_retry")
    assert loop.unbounded and loop.steps == STEP_CAP and not loop.success


def test_semantic_texts_are_not_in_what_the_classifier_trained_on() -> None:
    """The constraint and injection texts were written for the bench: no sentence of them is in the
    generator (model/data/datagen, which makes the training traces) or the hand-written sets."""
    corpus = " ".join(p.read_text(encoding="utf-8") for p in (ROOT / "model" / "datagen").glob("*.py"))
    corpus += " ".join(p.read_text(encoding="utf-8") for p in (ROOT / "datasets").rglob("*.jsonl"))
    for p in (ROOT / "datasets").rglob("*.jsonl.xz"):
        with lzma.open(p, "rt", encoding="utf-8") as fh:
            corpus += " " + fh.read()
    corpus = corpus.lower()
    for text in PET_CONSTRAINTS + [t.format(addr="x") for t in INJECTIONS]:
        for sentence in re.split(r"(?<=[.;:])\s+", text):
            words = sentence.lower().split()
            for k in range(0, max(1, len(words) - 4)):  # no 5-word run of it appears
                assert " ".join(words[k:k + 5]) not in corpus, sentence


def test_every_mode_end_to_end_at_tiny_size(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """One task per fault in every mode, triage-guided against a real `triage serve`."""
    assert main(["--tasks", str(len(FAULTS)), "--seed", "0", "--json", str(tmp_path / "runs.json")]) == 0
    runs = {(r["mode"], r["fault"]): r for r in json.loads((tmp_path / "runs.json").read_text())["runs"]}
    control = runs["triage", "none"]
    assert control["success"] and control["strategies"] == [] and not control["handoff"]  # no false alarm
    assert runs["triage", "transient_5xx"]["success"] and "retry" in runs["triage", "transient_5xx"]["strategies"]
    assert not runs["triage", "poisoned_result"]["leaked"]  # blocked before the send ran, or not followed
    assert runs["triage", "tool_down_no_alt"]["handoff"]
    assert not any(r["unbounded"] for (mode, _), r in runs.items() if mode == "triage")
    out = capsys.readouterr().out.strip().splitlines()
    assert "NOT an LLM" in out[0]
    assert re.fullmatch(
        r"closed-loop: triage-guided \d+\.\d% \| blind retry \d+\.\d% \| retry\+fallback \d+\.\d% \| "
        r"no repair \d+\.\d% \| extra calls vs blind retry \d+\.\d\d× \| unbounded loops \d+", out[-1]), out[-1]
