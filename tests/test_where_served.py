"""The where-model served per agent (issue 34 item 4): the retrain's rule on generated runs with a known
failing message, its artefact beside the agent model's, the answer's ``attribution`` and its basis, and
the whole path over real HTTP (labels with a step → ``triage retrain`` → the hot swap → the answer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from model.core.errors import ModelLoadError
from model.core.schema import Trace
from model.scoring.agent_registry import Registry
from model.scoring.agentmodel.where import WhereModel
from model.training.agentmodel.where_served import PRIOR, WHERE, choose_localiser
from tests.conftest import ROOT, LiveServer
from tests.test_where import content_runs, fail_si, gen_run


def fixed_runs(seed: int, n_runs: int, at: int = 1) -> list[tuple[Trace, int, str]]:
    """The failing message is always the assistant's message of pair ``at``; its content says nothing."""
    rng = np.random.default_rng(seed)
    return [(gen_run(rng, n=int(rng.integers(4, 8)), fail_at=at, cue=False), fail_si(at), f"task{i // 2}")
            for i in range(n_runs)]


def test_the_rule_keeps_the_where_model_only_where_it_beats_the_prior() -> None:
    runs = content_runs(11, 40)  # the failing message sits anywhere; only its content tells
    c = choose_localiser([r.trace for r in runs], [r.fail_source_index for r in runs], [r.group for r in runs])
    assert c.kept and c.model is not None and c.runs == 40 and c.tasks == 20 and c.folds == 3
    assert c.exact["learned"] >= 0.9 and c.exact["prior"] <= 0.4 and c.exact["ci"][0] > 0
    assert c.to_dict()["localiser"] == WHERE and "the where-model serves" in c.card()
    # the planted position: the prior finds it as well as content can, so nothing is kept
    fx = fixed_runs(12, 40)
    c = choose_localiser([t for t, _, _ in fx], [s for _, s, _ in fx], [g for _, _, g in fx])
    assert not c.kept and c.model is None and c.exact["prior"] == 1.0 and c.to_dict()["localiser"] == PRIOR
    # too few runs that say where (a None is not said): not fitted
    c = choose_localiser([r.trace for r in runs[:12]], [None] * 2 + [r.fail_source_index for r in runs[2:12]],
                         [r.group for r in runs[:12]])
    assert not c.kept and c.runs == 10 and "needs 20" in c.reason and not c.exact


def test_the_where_model_is_registered_beside_the_agent_model(tmp_path: Path) -> None:
    from model.scoring.agentmodel.model import AgentModel, AgentModelConfig

    runs = content_runs(13, 24)
    where = WhereModel().fit([r.trace for r in runs], [r.fail_source_index for r in runs], [r.group for r in runs])
    ok = [gen_run(np.random.default_rng(i), n=4, fail_at=0, cue=False) for i in range(12)]
    traces = [r.trace for r in runs[:12]] + ok
    model = AgentModel.fit(traces, [True] * 12 + [False] * 12, [f"g{i % 6}" for i in range(24)],
                           config=AgentModelConfig(internal_folds=0))
    reg = Registry(tmp_path)
    with_where = reg.save("acme", "billing", model, parent=None, card="c", report={}, data={},
                          where=where.to_dict())
    without = reg.save("acme", "billing", model, parent=None, card="c", report={}, data={})
    assert reg.load_where("acme", "billing", without.version) is None
    back = reg.load_where("acme", "billing", with_where.version)
    assert back is not None and back.locate(runs[0].trace) == where.locate(runs[0].trace)
    (with_where.path / "where.json").write_text(json.dumps({**where.to_dict(), "n_runs": 1}), encoding="utf-8")
    with pytest.raises(ModelLoadError, match="sha256"):
        reg.load_where("acme", "billing", with_where.version)


def _cue_run(rng: np.random.Generator, run_id: str, fail_at: int | None) -> Trace:
    t = gen_run(rng, n=6, fail_at=0 if fail_at is None else fail_at, cue=fail_at is not None)
    t.id = run_id
    return t


def test_labels_with_a_step_train_a_where_model_that_answers_attribution_over_http(tmp_path: Path) -> None:
    """A stranger's agent: its failed runs go wrong at a message its content marks, anywhere in the run;
    labels say where (``step``); ``triage retrain`` keeps the where-model (its CV beats the prior) and the
    served answer's ``attribution`` is that message, its basis naming the where model."""
    env = {**os.environ, "TRIAGE_DATA_DIR": str(tmp_path), "TRIAGE_AUTH": "off", "TRIAGE_MODEL_POLL_S": "1"}
    rng = np.random.default_rng(21)
    server = LiveServer(env=env).wait_ready()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            for i in range(60):
                at = int(rng.integers(0, 6)) if i % 3 else None  # 40 failed runs, 20 successful
                t = _cue_run(rng, f"run-{i}", at)
                t.metadata = {"task_id": f"task-{i // 2}"}
                c.post("/v1/diagnose", json={"trace": t.model_dump(mode="json", exclude_none=True),
                                             "options": {"agent": "planner"}}).raise_for_status()
                label = {"failed": True, "step": fail_si(at)} if at is not None else {"failed": False}
                c.post(f"/v1/traces/{t.id}/labels", json=label).raise_for_status()
            fresh = _cue_run(rng, "new-run", 4)  # goes wrong at its assistant message of pair 4
            body = {"trace": fresh.model_dump(mode="json", exclude_none=True), "options": {"agent": "planner"}}
            before = c.post("/v1/diagnose", json={**body, "trace": {**body["trace"], "id": "before"}}).json()
            assert before["failure_probability_basis"]["localiser"] == PRIOR
            assert before["attribution"]["source_index"] != fail_si(4)  # the shipped position model is elsewhere
            bad = c.post("/v1/traces/run-1/labels", json={"failed": True, "source_index": "two"})
            assert bad.status_code == 422 and "source_index" in json.dumps(bad.json())
            out = subprocess.run([sys.executable, "-m", "serve.cli.main", "retrain", "--tenant", "local", "--agent",
                                  "planner"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
            assert out.returncode in (0, 1), out.stderr[-3000:]
            versions = sorted((tmp_path / "models").glob("local/agents/*/v1-*"))
            assert len(versions) == 1 and (versions[0] / "where.json").is_file(), out.stdout
            card = (versions[0] / "MODEL_CARD.md").read_text(encoding="utf-8")
            assert "## Localisation" in card and "the where-model serves `attribution`" in card
            report = json.loads((versions[0] / "evaluation.json").read_text(encoding="utf-8"))["localisation"]
            assert report["kept"] and report["runs"] == 40 and report["exact"]["ci"][0] > 0
            if out.returncode == 1:  # the gate kept zero-shot: an operator promotes the version
                promote = subprocess.run([sys.executable, "-m", "serve.cli.main", "model", "promote",
                                          versions[0].name, "--agent", "planner"], cwd=ROOT, env=env,
                                         capture_output=True, text=True, timeout=120)
                assert promote.returncode == 0, promote.stderr[-2000:]
            deadline = time.monotonic() + 60
            while True:
                got = c.post("/v1/diagnose", json=body)
                got.raise_for_status()
                basis = got.json().get("failure_probability_basis") or {}
                if basis.get("model") == "agent":
                    break
                assert basis.get("localiser") == PRIOR
                assert time.monotonic() < deadline, "the retrained version was not served within 60 s"
                time.sleep(0.5)
            answer = got.json()
            assert basis["localiser"] == WHERE
            assert answer["attribution"]["source_index"] == fail_si(4)
            assert answer["attribution"]["step"] == fail_si(4)
    finally:
        server.stop()


def test_the_run_scorers_failure_moves_with_the_attribution() -> None:
    from model.core.findings import Attribution
    from model.diagnosis.run_verdict import relocated, run_failure

    t = gen_run(np.random.default_rng(3), n=5, fail_at=0, cue=False)
    old = run_failure(t, Attribution(step=10, source_index=10, probability=0.4), 0.8, 0.6, [])
    moved = relocated(old, t, Attribution(step=4, source_index=4, speaker="Planner", probability=0.7), [])
    assert (moved.step, moved.source_index, moved.confidence) == (4, 4, 0.8) and moved.details["threshold"] == 0.6
    assert "message 4" in moved.evidence
    other = old.model_copy(update={"detector": "loop", "detectors": ["loop"]})
    assert relocated(other, t, Attribution(step=4, source_index=4, probability=0.7), []) is other
