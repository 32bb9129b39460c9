"""``make repro``'s pieces (model/training/repro.py) and the lock check: no stage's code or params may
change without ``dvc.lock`` recording it (rerun the stage, or ``dvc commit`` it when ``make repro``
shows its outputs unchanged; docs/architecture.md "Reproducing the pipeline")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from model.training.repro import (
    code_deps,
    compare,
    compare_values,
    dvc_md5,
    load_stages,
    scratch_copy,
    stage_env,
    stage_order,
    stale_code_deps,
    tree_state,
)

ROOT = Path(__file__).resolve().parent.parent


#: Stages ``dvc.lock`` records as built by older code, each with why it is not rerun yet. Each entry
#: must still be stale (rerun or committed, it leaves the list), so the list only shrinks.
_RETRAIN = (
    "the shipped classifier (rep-v4, 2026-12-01) was built by code changed since: the modules moved "
    "(b41e8d1), the checkpointing split out of train.py, export's int8 weights in 7 bits (fe84c2b); "
    "rerunning it ships a new model (dvc repro gate), a decision of its own; make repro measures the rebuild"
)
AWAITING_RERUN: dict[str, str] = {
    **{stage: _RETRAIN for stage in ("baseline", "train", "student", "distill", "export", "evaluate")},
}


def test_dvc_lock_records_every_stages_code_and_params() -> None:
    stale = stale_code_deps(ROOT)
    unexpected = {name: what for name, what in stale.items() if name not in AWAITING_RERUN}
    assert not unexpected, (
        "code or params changed since dvc.lock recorded these stages; rerun them (dvc repro -s STAGE) or, "
        "when `make repro` shows their outputs unchanged, record the lock (dvc commit STAGE): "
        + json.dumps(unexpected, indent=1)
    )
    assert not set(AWAITING_RERUN) - set(stale), (
        f"{sorted(set(AWAITING_RERUN) - set(stale))} no longer stale: take them off AWAITING_RERUN"
    )


def test_stage_order_puts_each_stage_after_what_it_reads() -> None:
    stages = load_stages(ROOT)
    order = stage_order(stages)
    assert sorted(order) == sorted(s.name for s in stages)
    # gate reads reports/real.json, which evaluate_real (listed after it in dvc.yaml) writes
    assert order.index("gate") > order.index("evaluate_real") > order.index("runscore") > order.index("export")
    assert order[:3] == ["generate", "label", "split"]


def test_code_deps_leave_out_other_stages_outputs() -> None:
    deps = code_deps(load_stages(ROOT))
    assert "build/classifier/minilm/best" not in deps["distill"]
    assert "model/training/classifier/distill.py" in deps["distill"]
    assert "model/artifacts/classifier.onnx" not in deps["runscore"]
    assert "datasets/real" in deps["runscore"]  # vendored data, written by no stage


# dvc's own code calls pygtrie's soon-removed ``_NoneStep.value``: not ours, and harmless here
@pytest.mark.filterwarnings("ignore:_NoneStep.value:DeprecationWarning")
def test_lock_check_agrees_with_dvc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a real DVC project (dvc's own API, in process: its CLI costs seconds a call): clean after
    ``dvc repro``; a file in a folder dependency and a params section flagged once changed, as
    ``dvc status`` flags them; clean again after ``dvc commit``; a deleted dependency flagged."""
    repo_cls = pytest.importorskip("dvc.repo", reason="dvc is a [train] extra").Repo
    (tmp_path / "code" / "sub").mkdir(parents=True)
    (tmp_path / "code" / "a.py").write_text("A = 1\n")
    (tmp_path / "code" / "sub" / "b.py").write_text("B = 2\n")
    (tmp_path / "step.sh").write_text("echo hi\n")
    (tmp_path / "params.yaml").write_text("make: {n: 3}\nuse: {k: 1}\n")
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n"
        "  make:\n    cmd: sh step.sh > out.txt\n    deps: [step.sh, code]\n    params: [make]\n"
        "    outs: [out.txt]\n"
        "  use:\n    cmd: cat out.txt > used.txt\n    deps: [out.txt]\n    params: [use]\n"
        "    outs: [{used.txt: {cache: false}}]\n"
    )
    monkeypatch.chdir(tmp_path)  # dvc's reproduce/status collect from the working directory
    repo = repo_cls.init(str(tmp_path), no_scm=True)
    try:
        repo.reproduce()
        assert stale_code_deps(tmp_path) == {}

        (tmp_path / "code" / "sub" / "b.py").write_text("B = 3\n")
        (tmp_path / "params.yaml").write_text("make: {n: 3}\nuse: {k: 2}\n")
        assert stale_code_deps(tmp_path) == {"make": ["code"], "use": ["params.yaml:use"]}
        assert {"code": "modified"} in [e.get("changed deps") for e in repo.status()["make"]]

        repo.commit("make", force=True)
        repo.commit("use", force=True)
        assert stale_code_deps(tmp_path) == {}
        (tmp_path / "step.sh").unlink()
        assert stale_code_deps(tmp_path) == {"make": ["step.sh (deleted)"]}
    finally:
        repo.close()


def test_dvc_md5_of_a_folder_is_dvcs(tmp_path: Path) -> None:
    """The md5 of a folder is that of DVC's ``.dir`` listing (checked against dvc.lock in the test above);
    bytecode is left out as the repository's .dvcignore says."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.py").write_text("x\n")
    before = dvc_md5(tmp_path / "d")
    (tmp_path / "d" / "__pycache__").mkdir()
    (tmp_path / "d" / "__pycache__" / "x.cpython-312.pyc").write_bytes(b"\0")
    assert dvc_md5(tmp_path / "d") == before and before.endswith(".dir")


@pytest.mark.parametrize(
    ("shipped", "rebuilt", "ok"),
    [(0.90, 0.92, True), (0.90, 0.94, False), (0.90, 0.87, True), (0.90, 0.869, False),
     (["hallucination"], [], False), ([], [], True), ("student-hard", "student", False), (0.5, None, False)],
)
def test_compare_values(shipped: object, rebuilt: object, ok: bool) -> None:
    assert compare_values("evaluate", "x", shipped, rebuilt, 0.03).ok is ok


def test_compare_flags_a_figure_out_of_tolerance(tmp_path: Path) -> None:
    """A rebuilt ``reports/metrics.json`` whose test macro-F1 moved by more than the tolerance fails its
    row; an unchanged one passes every row of the stage."""
    shipped = json.loads((ROOT / "reports" / "metrics.json").read_text(encoding="utf-8"))
    (tmp_path / "reports").mkdir()
    shutil.copy2(ROOT / "reports" / "metrics.json", tmp_path / "reports" / "metrics.json")
    rows = [r for r in compare(ROOT, tmp_path, ["evaluate"]) if "metrics.json:" in r.artefact]
    assert rows and all(r.ok for r in rows)

    shipped["test"]["macro_f1"] -= 0.05
    (tmp_path / "reports" / "metrics.json").write_text(json.dumps(shipped), encoding="utf-8")
    failed = [r.artefact for r in compare(ROOT, tmp_path, ["evaluate"]) if r.ok is False]
    assert "reports/metrics.json: test.macro_f1" in failed
    assert "reports/metrics.json (md5, committed)" not in failed  # bytes may differ; figures judge


def test_scratch_copy_takes_the_working_tree_not_what_git_ignores(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    (src / ".dvc").mkdir(parents=True)
    (src / ".gitignore").write_text("build/\n")
    (src / "tracked.py").write_text("old\n")
    (src / "dvc.lock").write_text("schema: '2.0'\n")
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    subprocess.run(["git", "-C", str(src), "add", "-A"], check=True)
    (src / "tracked.py").write_text("edited, not committed\n")
    (src / "new.py").write_text("untracked\n")
    (src / "build").mkdir()
    (src / "build" / "model.bin").write_text("ignored\n")
    dest.mkdir()
    scratch_copy(src, dest)
    assert (dest / "tracked.py").read_text() == "edited, not committed\n"
    assert (dest / "new.py").exists() and not (dest / "build").exists()
    assert "no_scm = true" in (dest / ".dvc" / "config.local").read_text()
    before = tree_state(src)
    (src / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    assert tree_state(src) != before  # an edited dvc.lock is a touched tree


def test_stage_env_runs_python_and_triage_with_this_interpreter(tmp_path: Path) -> None:
    env = stage_env(tmp_path)
    shims = Path(env["PATH"].split(os.pathsep)[0])
    # the shim's python is this venv's (its packages importable), not the base interpreter behind the link
    out = subprocess.run([str(shims / "python"), "-c", "import sys, sklearn; print(sys.prefix)"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == sys.prefix
    assert f'exec "{sys.executable}" -m serve.cli.main' in (shims / "triage").read_text()
    assert os.access(shims / "triage", os.X_OK)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path)
