"""The vendored real sets: counts, labels at the right message, and no label leaking into a trace."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from model.core.schema import StepKind, StepStatus
from model.data.realdata import (
    LOSO_FAMILY,
    RUN_LEVEL_SOURCES,
    SOURCES,
    label_hash,
    load_source,
    loso_family,
    reflexion_trace,
    swe_trace,
    tau_failing_message,
    webshop_trace,
)


@pytest.fixture(scope="module")
def runs() -> dict[str, list]:
    return {s: load_source(s) for s in SOURCES}


def test_counts_and_run_level_labels(runs: dict[str, list]) -> None:
    got = {s: (len(r), sum(x.failed for x in r), len({x.group for x in r})) for s, r in runs.items()}
    assert got == {"tau_airline": (200, 116, 50), "agentprocessbench": (200, 66, 40), "swe": (500, 129, 500),
                   "whowhen": (126, 126, 126), "tau2": (200, 75, 60), "webshop": (500, 321, 500),
                   "reflexion_hotpotqa": (100, 66, 100)}
    assert set(RUN_LEVEL_SOURCES) == {s for s, rs in runs.items() if 0 < sum(r.failed for r in rs) < len(rs)}
    for s, rs in runs.items():
        assert all(r.trace.labels.failed is r.failed and r.trace.labels.healthy is (not r.failed) for r in rs), s


def test_failing_message_labels(runs: dict[str, list]) -> None:
    # every failed run of the step-labelled sets says where; successful ones and SWE never do
    for s in ("tau_airline", "agentprocessbench", "whowhen"):
        assert all(r.fail_source_index is not None for r in runs[s] if r.failed), s
        assert all(r.fail_source_index is None for r in runs[s] if not r.failed), s
    for s in ("swe", "tau2", "webshop", "reflexion_hotpotqa"):
        assert all(r.fail_source_index is None for r in runs[s]), s
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


#: Label fields and verdicts of every set: none may occur in a trace (labels excluded) of any set.
#: Field names as keys (quoted, escaped or not, then a colon): words like "reward" occur in prose.
LABEL_KEYS = re.compile(r'\\?"(reward|reward_info|ground_truth|step_labels|final_label|mistake_step|mistake_agent|'
                        r'evaluation_criteria|user_scenario|task_instructions|actions|answer_text)\\?"\s*:')
LABEL_MARKERS = (
    "Your score (min", "Answer is CORRECT", "Answer is INCORRECT", "Correct answer:", "Trial summary:",
    "BEGIN CORRECT AGENTS", "BEGIN INCORRECT AGENTS", "BEGIN HALTED AGENTS", "[PERSONA:", "[mobile_data_issue]",
    "[service_issue]", "[mms_issue]",
)


def _trace_text(run) -> str:  # type: ignore[no-untyped-def]
    return json.dumps(run.trace.model_dump(mode="json", exclude={"labels"}), ensure_ascii=False)


def test_no_label_reaches_any_trace(runs: dict[str, list]) -> None:
    """Every serialised trace of every set, searched for each set's label fields and verdicts."""
    for s, rs in runs.items():
        for r in rs:
            text = _trace_text(r)
            hits = [m for m in LABEL_MARKERS if m in text] + LABEL_KEYS.findall(text)
            assert not hits, (s, r.run_id, hits)
    # the set-specific label values: τ² telecom task ids (they name the injected faults), the
    # hidden user instructions, τ-bench's expected write actions' reward breakdown; Reflexion's
    # reference answers where the agent did not give them
    import lzma
    from pathlib import Path

    from model.data.realdata import DEFAULT_ROOT, TAU2_FILES
    folder = Path(DEFAULT_ROOT) / SOURCES["tau2"]
    secrets: set[str] = set()
    for name in TAU2_FILES:
        data = json.loads(lzma.decompress((folder / name).read_bytes()))
        for t in data["tasks"]:
            if not str(t["id"]).isdigit():
                secrets.add(str(t["id"]))
            secrets.add(str(t["user_scenario"]["instructions"]["task_instructions"])[:60])
    tau2_text = "\n".join(_trace_text(r) for r in runs["tau2"])
    assert len(secrets) > 40 and not [x for x in secrets if x in tau2_text]
    rx = (Path(DEFAULT_ROOT) / SOURCES["reflexion_hotpotqa"] / "ReAct_base_100_questions_5_trials.txt.xz")
    refs = {x.strip() for x in re.findall(r"^Correct answer: (.*)$", lzma.decompress(rx.read_bytes()).decode(),
                                          re.MULTILINE)}
    for r in runs["reflexion_hotpotqa"]:
        # the reference may occur only where the agent itself wrote it (its own answer or reasoning)
        tool_text = " ".join(st.content for st in r.trace.steps if st.kind is StepKind.TOOL_RESULT)
        assert "Correct answer" not in tool_text
    assert len(refs) > 50


def test_webshop_reward_stays_in_the_label(runs: dict[str, list]) -> None:
    ws = runs["webshop"]
    rewards = [r.trace.labels.provenance["reward"] for r in ws]
    assert all(r.failed is (x < 1.0) for r, x in zip(ws, rewards, strict=True))
    assert (sum(x == 1.0 for x in rewards), sum(0 < x < 1 for x in rewards), sum(x == 0 for x in rewards)) == (
        179, 265, 56)
    assert abs(sum(rewards) / 500 - 0.638) < 1e-3
    first = ws[0]  # bought an option holding '#': no score page, reward 0 (a harness artefact)
    assert first.failed and first.trace.steps[-1].kind is StepKind.FINAL_OUTPUT
    assert first.trace.steps[-1].content == "click[Buy Now]"
    # 465 runs end on a purchase, 35 at the step cap with none; 310 invalid actions are error results
    assert sum(r.trace.steps[-1].kind is StepKind.FINAL_OUTPUT for r in ws) == 465
    assert sum(s.status is StepStatus.ERROR for r in ws for s in r.trace.steps) == 310


def test_tau2_trace_is_what_the_agent_saw(runs: dict[str, list]) -> None:
    t2 = runs["tau2"]
    modes = Counter((r.trace.labels.provenance["domain"], r.trace.labels.provenance["mode"]) for r in t2)
    assert modes == {("airline", "default"): 40, ("telecom", "default"): 80, ("telecom", "no-user"): 80}
    # one telecom task: the same group across both models and both modes
    by_group = Counter(r.group for r in t2)
    assert sorted(set(by_group.values())) == [2, 4]
    for r in t2:
        assert r.trace.steps[0].kind is StepKind.SYSTEM
        if r.trace.labels.provenance["domain"] == "telecom" and r.trace.labels.provenance["mode"] == "default":
            # with a user, the phone tools are the user's: their calls never reach the agent's trace
            assert not {s.tool_name for s in r.trace.steps} & {"toggle_airplane_mode", "run_speed_test",
                                                                "check_status_bar"}, r.run_id
        assert r.run_id.endswith(r.trace.labels.provenance["task"]) and "[" not in r.run_id
    solo = [r for r in t2 if r.trace.labels.provenance["mode"] == "no-user"]
    assert all(r.trace.steps[1].kind is StepKind.USER_INPUT for r in solo)  # the ticket
    assert label_hash("x") == label_hash("x") and len(label_hash("x")) == 12


def test_loso_family_holds_both_airline_sets_out_together() -> None:
    assert loso_family("tau_airline") == loso_family("tau2") == "airline"
    assert {loso_family(s) for s in RUN_LEVEL_SOURCES} == {"airline", "agentprocessbench", "swe", "webshop",
                                                           "reflexion_hotpotqa"}
    assert set(LOSO_FAMILY) == set(SOURCES)


def test_webshop_trace_parses_one_printed_episode() -> None:
    body = ("Action: reset\nObservation: \nWebshop \nInstruction:  \ni want a red mug \n[Search] \n\n"
            "Action: search[red mug]\nObservation: \n[Back to Search] \n[B01] \nRed Mug \n$5 \n\n"
            "Action: think[B01 fits.\nObservation: OK.\n\n"
            "Action: click[Buy Now]\nObservation: Invalid action!\n\n"
            "Action: click[B01]\nObservation: \n[Buy Now] \n\n"
            "Action: click[Buy Now]\nObservation: Your score (min 0.0, max 1.0): 1.0\n\n")
    t = webshop_trace(body, "webshop:x")
    assert [(s.kind.value, s.tool_name, s.status) for s in t.steps] == [
        ("user_input", None, None), ("tool_call", "search", None), ("tool_result", "search", StepStatus.OK),
        ("llm_reasoning", None, None), ("tool_call", "click", None), ("tool_result", "click", StepStatus.ERROR),
        ("tool_call", "click", None), ("tool_result", "click", StepStatus.OK), ("final_output", None, None)]
    assert "i want a red mug" in t.steps[0].content and t.steps[3].content == "B01 fits."
    assert "score" not in _trace_text(type("R", (), {"trace": t})())


def test_reflexion_trace_drops_the_verdict_and_reference() -> None:
    agent = ("Question: Who wrote X?\nThought 1: I need to search X.\nAction 1: Search[X]\n"
             "Observation 1: X is a book\nby Y.\nThought 2: Y wrote it.\nAction 2: Finish[Y]\n"
             "Observation 2: Answer is CORRECT\nCorrect answer: Y\n")
    t, q = reflexion_trace(agent, "rx:x")
    assert q == "Who wrote X?"
    assert [(s.kind.value, s.content) for s in t.steps] == [
        ("user_input", "Who wrote X?"), ("llm_reasoning", "I need to search X."), ("tool_call", "Search[X]"),
        ("tool_result", "X is a book\nby Y."), ("llm_reasoning", "Y wrote it."), ("final_output", "Y")]
    assert t.steps[2].tool_name == "search" and t.steps[3].tool_name == "search"


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
