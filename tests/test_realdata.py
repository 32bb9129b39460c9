"""The vendored real sets: counts, labels at the right message, and no label leaking into a trace."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from model.realdata import SOURCES, load_source, swe_trace, tau_failing_message
from model.schema import StepKind


@pytest.fixture(scope="module")
def runs() -> dict[str, list]:
    return {s: load_source(s) for s in SOURCES}


def test_counts_and_run_level_labels(runs: dict[str, list]) -> None:
    got = {s: (len(r), sum(x.failed for x in r), len({x.group for x in r})) for s, r in runs.items()}
    assert got == {"tau_airline": (200, 116, 50), "agentprocessbench": (200, 66, 40), "swe": (500, 129, 500),
                   "whowhen": (126, 126, 126)}
    for s, rs in runs.items():
        assert all(r.trace.labels.failed is r.failed and r.trace.labels.healthy is (not r.failed) for r in rs), s


def test_failing_message_labels(runs: dict[str, list]) -> None:
    # every failed run of the step-labelled sets says where; successful ones and SWE never do
    for s in ("tau_airline", "agentprocessbench", "whowhen"):
        assert all(r.fail_source_index is not None for r in runs[s] if r.failed), s
        assert all(r.fail_source_index is None for r in runs[s] if not r.failed), s
    assert all(r.fail_source_index is None for r in runs["swe"])
    ww = {r.run_id: r for r in runs["whowhen"]}
    assert ww["whowhen:1"].fail_source_index == 0 and ww["whowhen:1"].fail_speaker == "Excel_Expert"
    apb = {r.run_id: r for r in runs["agentprocessbench"]}
    assert apb["agentprocessbench:0:0"].fail_source_index == 8  # step_labels {'2': 1, '4': 1, '6': 1, '8': -1}
    rules = Counter(r.trace.labels.provenance["derived"] for r in runs["tau_airline"] if r.failed)
    assert rules == {"departing_write_call": 82, "missing_write_call": 31, "all_calls_match": 3}
    for r in runs["tau_airline"] + runs["agentprocessbench"] + runs["whowhen"]:
        if r.failed:
            lab = r.trace.labels.failures[0]
            assert lab.kind is None and r.trace.steps[lab.step].source_index == lab.source_index


def test_labels_are_never_inputs(runs: dict[str, list]) -> None:
    """Reference answers and expected actions stay out of the traces a diagnosis reads."""
    apb = load_source("agentprocessbench")
    for r in apb[:40]:
        text = json.dumps([s.model_dump(mode="json") for s in r.trace.steps])
        assert "ground_truth" not in text and "step_labels" not in text
        assert r.trace.metadata == {}
    for r in runs["tau_airline"][:20]:
        assert r.trace.metadata == {} and "reward" not in json.dumps(r.trace.metadata)
    for r in runs["whowhen"][:20]:
        assert "mistake" not in json.dumps(r.trace.model_dump(mode="json", exclude={"labels"}))


def test_tau_failing_message_rule() -> None:
    traj = [
        {"role": "user", "content": "cancel my trip"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "cancel_reservation",
                                                                          "arguments": '{"reservation_id": "X"}'}}]},
        {"role": "tool", "content": "done"},
        {"role": "assistant", "content": "Cancelled."},
    ]
    assert tau_failing_message(traj, [{"name": "cancel_reservation", "kwargs": {"reservation_id": "Y"}}]) == (
        1, "departing_write_call")
    assert tau_failing_message(traj, [{"name": "cancel_reservation", "kwargs": {"reservation_id": "X"}},
                                      {"name": "send_certificate", "kwargs": {}}]) == (3, "missing_write_call")
    # read-only calls never depart
    assert tau_failing_message(traj, [{"name": "get_user_details", "kwargs": {}},
                                      {"name": "cancel_reservation", "kwargs": {"reservation_id": "X"}}])[1] \
        == "all_calls_match"


def test_swe_trace_reads_one_bash_block_per_message() -> None:
    msgs = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "<pr_description>fix it</pr_description>"},
        {"role": "assistant", "content": "THOUGHT: look.\n\n```python\nx = 1\n```\n\n```bash\nls -la\n```"},
        {"role": "user", "content": "<returncode>2</returncode>\n<output>no such file</output>"},
        {"role": "assistant", "content": "THOUGHT: done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff\n```"},
        {"role": "user", "content": "diff --git a/x b/x"},
    ]
    t = swe_trace(msgs, "swe:x")
    kinds = [(s.kind.value, s.source_index) for s in t.steps]
    assert kinds == [("system", 0), ("user_input", 1), ("llm_output", 2), ("tool_call", 2), ("tool_result", 3),
                     ("llm_output", 4), ("tool_call", 4), ("final_output", 5)]
    assert t.steps[3].tool_args == {"command": "ls -la"} and t.steps[4].metadata == {"returncode": 2}
    assert t.steps[4].status.value == "ok"  # a non-zero return code is not by itself a failure
    assert "x = 1" in t.steps[2].content and t.steps[4].kind is StepKind.TOOL_RESULT
