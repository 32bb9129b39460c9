"""`triage label review` under a real pseudo-terminal (pexpect): a key per label, saved as it goes,
resumable."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pexpect
import pytest

from model.core.schema import LabelSource, Trace
from model.data.builder import make_trace
from model.data.datagen import write_jsonl
from model.data.labelling import HumanLabelStore
from serve.services.label_queue import compact, file_review_queue

TRIAGE = str(Path(sys.executable).parent / "triage")


def _weak(kind: str, seed: int, review: bool = True) -> Trace:
    t = make_trace(kind, seed=seed, n_steps=7)
    assert t.labels is not None
    t.id = f"weak-{kind}-{seed}"
    for f in t.labels.failures:
        f.source = LabelSource.RULE_VOTE
        f.confidence = 0.6
    t.labels.source = LabelSource.RULE_VOTE
    t.labels.provenance = {"review": review}
    return t


@pytest.fixture
def queue_file(tmp_path: Path) -> Path:
    p = tmp_path / "labelled.jsonl"
    traces = [_weak("timeout", 1), _weak("refusal", 2), _weak("tool_error", 3, review=False), _weak("loop", 4)]
    write_jsonl(iter(traces), p)
    return p


def test_queue_and_compact_view(queue_file: Path) -> None:
    from model.data.datagen import read_jsonl

    ts = list(read_jsonl(queue_file))
    assert [t.id for t in file_review_queue(ts, set())] == ["weak-timeout-1", "weak-refusal-2", "weak-loop-4"]
    assert [t.id for t in file_review_queue(ts, {"weak-timeout-1"}, everything=True)] == [
        "weak-refusal-2", "weak-tool_error-3", "weak-loop-4"]
    view = compact(ts[0]).splitlines()
    assert len(view) == len(ts[0].steps)
    step = ts[0].labels.failures[0].step  # type: ignore[union-attr]
    assert view[step].startswith("*") and "[timeout]" in view[step]


def _spawn(queue_file: Path, human: Path) -> pexpect.spawn:
    return pexpect.spawn(TRIAGE, ["label", "review", str(queue_file), "--human", str(human), "--labeller", "ana"],
                         encoding="utf-8", timeout=30, dimensions=(50, 160))


@pytest.mark.slow
def test_review_keys_save_as_they_go_and_resume(queue_file: Path, tmp_path: Path) -> None:
    human = tmp_path / "human.jsonl"
    child = _spawn(queue_file, human)
    child.expect(r"3 trace\(s\) to review \(0 already labelled")
    child.expect("=== 1/3  weak-timeout-1")
    child.expect(r"timeout @ step (\d+) \(conf 0\.60\)  \[y\] keep")
    timeout_step = int(child.match.group(1))
    child.send("y")
    child.expect(r"kind key, \[Enter\] done")
    child.send("z")  # not a key: asked again
    child.expect("press one of")
    child.send("g")  # add an ignored_error …
    child.expect("step")
    child.sendline("99")  # … out of range: refused
    child.expect("step must be in")
    child.expect(r"kind key")
    child.send("g")
    child.expect("step")
    child.sendline("2")
    child.expect(r"kind key")
    child.send("\r")
    child.expect(f"saved: timeout@{timeout_step}, ignored_error@2")
    child.expect("=== 2/3  weak-refusal-2")
    child.expect(r"\[y\] keep")
    child.send("q")
    child.expect("progress is saved")
    child.expect(pexpect.EOF)
    saved = HumanLabelStore(human).load()
    assert list(saved) == ["weak-timeout-1"]
    first = saved["weak-timeout-1"]
    assert [(k.value, s) for k, s in first.failures] == [("timeout", timeout_step), ("ignored_error", 2)]
    assert first.labeller == "ana" and first.weak[0]["verdict"] == "keep"

    # resume: the labelled trace is not shown again
    child = _spawn(queue_file, human)
    child.expect(r"2 trace\(s\) to review \(1 already labelled")
    child.expect("=== 1/2  weak-refusal-2")
    child.expect(r"\[y\] keep")
    child.send("n")  # the refusal was a false alarm
    child.expect("kind key")
    child.send("\r")
    child.expect("saved: healthy")
    child.expect("=== 2/2  weak-loop-4")
    child.expect(r"\[y\] keep")
    child.send("y")
    child.expect("kind key")
    child.send("\r")
    child.expect("nothing left to review")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    lines = [json.loads(x) for x in human.read_text(encoding="utf-8").splitlines()]
    assert [x["trace_id"] for x in lines] == ["weak-timeout-1", "weak-refusal-2", "weak-loop-4"]
    assert lines[1]["failures"] == [] and lines[1]["weak"] == [{"kind": "refusal", "step": lines[1]["weak"][0]["step"],
                                                                "verdict": "reject"}]


def test_review_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{nope\n", encoding="utf-8")
    child = pexpect.spawn(TRIAGE, ["label", "review", str(bad), "--human", str(tmp_path / "h.jsonl")],
                          encoding="utf-8", timeout=30)
    child.expect("line 1")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2
