"""`triage label review --from-store`: the most uncertain stored traces first, keys from scripted
stdin (and one real pseudo-terminal), labels written by the API's code path and read back over HTTP
as the effective label; resumable; on SQLite and PostgreSQL."""

from __future__ import annotations

import getpass
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pexpect
import pytest

from model.core.options import DiagnoseOptions
from model.data.builder import make_trace
from model.diagnosis.diagnoser import Diagnoser
from serve.schemas import LabelRequest
from serve.services.label_queue import Measure, agree, margin, measure_margin, review_queue
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.wiring import build_service, load_runscorer
from tests.conftest import ROOT, LiveServer
from tests.storefix import db_url  # noqa: F401  (fixture)

TRIAGE = str(Path(sys.executable).parent / "triage")
TENANT = "local"  # the tenant of TRIAGE_AUTH=off, so the live server reads these traces back
KINDS = ["loop", None, "tool_error", "hallucination", None, "timeout"]


def _service(url: str, data: Path) -> TriageService:
    settings = Settings(database_url=url, data_dir=data)
    return build_service(settings, Diagnoser(runscorer=load_runscorer(settings)))


@pytest.fixture
def history(db_url: str, tmp_path: Path) -> Iterator[tuple[str, TriageService, list[str]]]:  # noqa: F811
    service = _service(db_url, tmp_path / "data")
    ids = []
    for n, kind in enumerate(KINDS):
        trace = make_trace(kind, seed=10 + n, n_steps=8)
        trace.id = f"run-{n}"
        service.diagnose(TENANT, trace, DiagnoseOptions())
        ids.append(trace.id)
    yield db_url, service, ids
    service.stores.db.dispose()


def test_margin_measures_the_nearest_decision() -> None:
    # the run probability against the operating point…
    assert margin({"failure_probability": 0.30, "failures": [], "signals": []}, 0.45)[0] == pytest.approx(0.15)
    # …or a finding nearer its kind's threshold (0.5)
    m, basis = margin({"failure_probability": 0.9, "signals": [{"kind": "loop", "confidence": 0.45}]}, 0.45)
    assert m == pytest.approx(0.05) and basis.startswith("loop confidence 0.4500")
    # no operating point known: 0.5
    assert margin({"failure_probability": 0.6}, None)[0] == pytest.approx(0.1)
    # a flagged run keeps the operating point it was judged at; its finding is that same decision
    flagged = {"failure_probability": 0.6, "failures": [
        {"kind": "hallucination", "confidence": 0.6, "detector": "runscore", "details": {"threshold": 0.55}}]}
    assert margin(flagged, 0.3) == (pytest.approx(0.05), "failure probability 0.6000 vs operating point 0.5500")
    # nothing to measure: last in the queue
    assert margin({"failures": []}, 0.4) == (1.0, "nothing to measure (no failure probability, no finding)")
    # the same as figures, for the console to word them (serve/routers/ui_queue.py)
    assert measure_margin(flagged, 0.3)[1] == Measure("failure probability", 0.6, 0.55)
    assert measure_margin({"failure_probability": 0.9, "signals": [{"kind": "loop", "confidence": 0.45}]},
                          0.45)[1] == Measure("loop", 0.45, 0.5)
    assert measure_margin({"failures": []}, 0.4) == (1.0, Measure(None))


def test_agree_takes_the_verdict_and_only_found_kinds() -> None:
    assert agree({"healthy": True}) == {"failed": False}
    assert agree({"healthy": False, "primary": {"kind": "loop", "step": 7, "detector": "loop"}}) == {
        "failed": True, "kind": "loop", "step": 7}
    assert agree({"healthy": False, "primary": {"kind": "hallucination", "step": 4, "detector": "runscore"}}) == {
        "failed": True, "kind": None, "step": 4}
    assert isinstance(agree({"healthy": None}), str)  # no verdict to agree with


def test_queue_most_uncertain_first_and_skips_own_labels(history: tuple[str, TriageService, list[str]]) -> None:
    _, service, ids = history
    scorer = service.diagnoser.runscorer
    assert scorer is not None
    queue, done = review_queue(service.stores.labels, TENANT, author="ana", threshold_for=lambda _: scorer.threshold,
                               order="margin")
    assert done == 0 and sorted(c.trace_id for c in queue) == sorted(ids)
    margins = [c.margin for c in queue]
    assert margins == sorted(margins)
    for c in queue:  # each margin is the smallest distance to a decision of its stored diagnosis
        r = c.response
        found = r["failures"] + r["signals"]
        judged = [f["details"]["threshold"] for f in found if f["detector"] == "runscore"]
        dists = [abs(r["failure_probability"] - (judged[0] if judged else scorer.threshold))]
        dists += [abs(f["confidence"] - 0.5) for f in found if f["detector"] != "runscore"]
        assert c.margin == pytest.approx(min(dists))
    service.add_label(TENANT, queue[0].trace_id, LabelRequest(failed=True, author="ana"))
    service.add_label(TENANT, queue[1].trace_id, LabelRequest(failed=True, author="bob"))
    again, done = review_queue(service.stores.labels, TENANT, author="ana", threshold_for=lambda _: scorer.threshold,
                               order="margin")
    assert done == 1 and [c.trace_id for c in again] == [c.trace_id for c in queue[1:]]


def _review(url: str, data: Path, script: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TRIAGE, "label", "review", "--from-store", "--store", url, "--tenant", TENANT, *extra],
        input=script, capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={"PATH": str(Path(sys.executable).parent), "TRIAGE_DATA_DIR": str(data), "HOME": str(data)},
    )


def _shown(out: str) -> list[str]:
    return re.findall(r"^=== \d+/\d+  (\S+)  \(", out, flags=re.M)


@pytest.mark.slow
def test_scripted_review_writes_api_labels_and_resumes(
    history: tuple[str, TriageService, list[str]], tmp_path: Path
) -> None:
    url, service, ids = history
    scorer = service.diagnoser.runscorer
    assert scorer is not None
    order = [c.trace_id for c in review_queue(service.stores.labels, TENANT, author="ana",
                                              threshold_for=lambda _: scorer.threshold)[0]]
    first = order[0]
    # a checker said the first run was fine; the reviewer (a human) will outrank it
    service.add_label(TENANT, first, LabelRequest(failed=False, author="ci", author_type="checker"))
    data = tmp_path / "cli"
    script = "\n".join([
        "z",            # not a key: asked again
        "k", "l",       # kind: loop
        "s", "99", "x", "2",  # step: out of range, not a number, then 2
        "f",            # save: failed, loop @ step 2
        "o",            # second: ok
        "n",            # third: skipped
        "q",            # fourth: quit
    ]) + "\n"
    got = _review(url, data, script, "--author", "ana")
    assert got.returncode == 0, got.stdout + got.stderr
    out = got.stdout
    assert "Traceback" not in out + got.stderr
    assert f"{len(ids)} trace(s) of tenant 'local' to review, in random order (0 already labelled by ana)" in out
    assert _shown(out) == order[:4]
    assert "not a key here: 'z'; press one of: f o a k s n u q" in out
    last = len(service.stored_trace(TENANT, first).steps) - 1
    assert f"not a step: '99'; a number in 0..{last}" in out and "not a step: 'x'" in out
    assert "pending: failed, kind loop, step 2" in out
    assert "saved: failed, loop @ step 2 (effective label: failed by ana)" in out
    assert "saved: ok (effective label: ok by ana)" in out
    assert "skipped (shown again next time)" in out
    assert "stopped; 2 label(s) saved, rerun to carry on" in out

    rows = service.stores.labels.trace_labels(TENANT, first)
    mine = [r for r in rows if r["author"] == "ana"]
    assert [(r["failed"], r["kind"], r["step"], r["author_type"]) for r in mine] == [(True, "loop", 2, "human")]
    assert mine[0]["source_index"] is not None  # placed like the API places it

    # resume: the two labelled traces are not shown again; the skipped one comes first
    got = _review(url, data, "a\n", "--author", "ana")
    assert got.returncode == 0, got.stdout + got.stderr
    assert f"{len(ids) - 2} trace(s) of tenant 'local' to review, in random order (2 already labelled by ana)" \
        in got.stdout
    assert _shown(got.stdout) == order[2:4]
    assert "saved: " in got.stdout and "end of input; 1 label(s) saved, rerun to carry on" in got.stdout
    third = service.stores.labels.trace_labels(TENANT, order[2])
    diagnosed = service.get_trace(TENANT, order[2]).diagnosis or {}
    assert [bool(r["failed"]) for r in third] == [diagnosed.get("healthy") is False]  # "agree" took the verdict
    primary = diagnosed.get("primary") or {}
    assert [r["kind"] for r in third] == [
        None if diagnosed.get("healthy") or primary.get("detector") == "runscore" else primary.get("kind")]

    # without --author the labels are cli:<user>'s, and a quit writes nothing
    got = _review(url, data, "q\n")
    assert f"(0 already labelled by cli:{getpass.getuser()})" in got.stdout and "stopped; 0 label(s)" in got.stdout

    # the effective label over the API: the reviewer's, outranking the checker
    server = LiveServer(env={"TRIAGE_AUTH": "off", "TRIAGE_DATA_DIR": str(tmp_path / "srv"),
                             "TRIAGE_DATABASE_URL": url}).wait_ready()
    try:
        label = httpx.get(f"{server.url}/v1/traces/{first}", timeout=30).json()["label"]
        assert label["failed"] is True and label["author"] == "ana" and label["author_type"] == "human"
        assert [(f["kind"], f["step"]) for f in label["failures"]] == [("loop", 2)] and label["labels"] == 2
        second = httpx.get(f"{server.url}/v1/traces/{order[1]}", timeout=30).json()["label"]
        assert second["failed"] is False and second["author"] == "ana"
    finally:
        server.stop()


@pytest.mark.slow
def test_bad_options_are_messages_not_tracebacks(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    got = _review(url, tmp_path, "", "--tenant", "no tenant!")
    assert got.returncode == 2 and "tenant" in got.stderr and "Traceback" not in got.stderr
    got = subprocess.run([TRIAGE, "label", "review"], capture_output=True, text=True, timeout=60)
    assert got.returncode == 2 and "--from-store" in got.stderr
    got = _review(url, tmp_path, "")
    assert got.returncode == 0 and "0 trace(s)" in got.stdout and "nothing left to review" in got.stdout


@pytest.mark.slow
def test_review_in_a_real_terminal_takes_single_keys(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tty.db'}"
    service = _service(url, tmp_path / "data")
    trace = make_trace("loop", seed=3, n_steps=8)
    trace.id = "tty-run"
    service.diagnose(TENANT, trace, DiagnoseOptions())
    child = pexpect.spawn(TRIAGE, ["label", "review", "--from-store", "--store", url, "--tenant", TENANT,
                                   "--author", "tty"], encoding="utf-8", timeout=60, dimensions=(50, 160),
                          cwd=str(ROOT), env={"PATH": str(Path(sys.executable).parent),
                                              "TRIAGE_DATA_DIR": str(tmp_path / "data")})
    child.expect("=== 1/1  tty-run")
    child.expect(r"\[q\] quit: ")
    child.send("?")
    child.expect("not a key here")
    child.send("k")
    child.expect(r"kind key, \[Enter\] cancels: ")
    child.send("l")
    child.expect("pending: failed, kind loop, step -")
    child.expect(r"\[q\] quit: ")
    child.send("s")
    child.expect(r"step \(0\.\.\d+, Enter cancels\): ")
    child.sendline("2")
    child.expect("pending: failed, kind loop, step 2")
    child.expect(r"\[q\] quit: ")
    child.send("f")
    child.expect(r"saved: failed, loop @ step 2 \(effective label: failed by tty\)")
    child.expect("nothing left to review")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert [(r["failed"], r["kind"], r["step"], r["author"]) for r in service.stores.labels.trace_labels(TENANT, "tty-run")] \
        == [(True, "loop", 2, "tty")]
    service.stores.db.dispose()
