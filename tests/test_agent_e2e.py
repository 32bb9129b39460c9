"""Issue 20 item 4, against a real ``triage serve`` (uvicorn on 127.0.0.1): a labelled agent's real
runs (τ-bench airline, its training tasks) are posted with their labels, ``triage retrain`` fits its
agent model, and the held-out tasks' runs then stream in as live sessions, one message at a time, each
step answered by the agent model. Its early warning (``at_risk``) stays precise: at most 2 of 14 successful
sessions warned (where it fires is tested in ``tests/test_agent_serving.py``); the warnings are counted and
printed. The gate may keep zero-shot (on τ-airline TF-IDF's cross-validated
AUROC is above the agent model's): an operator then promotes the model (``triage model promote``), which
is what this test serves."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from model.data.realdata import load_source
from tests.conftest import ROOT, LiveServer

pytestmark = pytest.mark.slow

AGENT = "airline"


def _split(runs: list[Any]) -> tuple[list[Any], list[Any]]:
    tasks = sorted({r.group for r in runs})
    held = set(tasks[::4])  # a quarter of the tasks, never posted with labels
    return [r for r in runs if r.group not in held], [r for r in runs if r.group in held]


def _triage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "serve.cli.main", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_labelled_agents_live_sessions_are_answered_by_its_model_and_warned_precisely(tmp_path: Path) -> None:
    env = {**os.environ, "TRIAGE_DATA_DIR": str(tmp_path), "TRIAGE_AUTH": "off", "TRIAGE_MODEL_POLL_S": "1"}
    train, held = _split(load_source("tau_airline"))
    server = LiveServer(env=env).wait_ready()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            for r in train:
                t = r.trace.model_copy(deep=True)
                t.labels = None  # the label goes to the labels API, never in the trace
                t.metadata = {**t.metadata, "task_id": r.group}
                c.post("/v1/diagnose", json={"trace": t.model_dump(mode="json", exclude_none=True),
                                             "options": {"agent": AGENT}}).raise_for_status()
                c.post(f"/v1/traces/{t.id}/labels", json={"failed": r.failed, "author": "tau-checker",
                                                          "author_type": "checker"}).raise_for_status()
            out = _triage(env, "retrain", "--tenant", "local", "--agent", AGENT)
            print(out.stdout, out.stderr[-2000:])
            assert out.returncode in (0, 1), out.stderr[-3000:]
            listed = _triage(env, "model", "list", "--tenant", "local").stdout
            version = next(line.split()[0 if not line.strip().startswith("*") else 1]
                           for line in listed.splitlines() if line.strip().lstrip("* ").startswith("v1-"))
            if out.returncode == 1:  # the gate kept zero-shot (the cheap learners won): an operator promotes it
                assert _triage(env, "model", "promote", version, "--agent", AGENT).returncode == 0
            # the worker swaps the promoted version in on its next poll (TRIAGE_MODEL_POLL_S): probe until it
            # answers with it (under load the swap came after the first session step)
            probe = train[0].trace.model_copy(deep=True)
            probe.labels, probe.id = None, "probe-swap"
            deadline = time.monotonic() + 60
            while True:
                resp = c.post("/v1/diagnose", json={"trace": probe.model_dump(mode="json", exclude_none=True),
                                                    "options": {"agent": AGENT}})
                resp.raise_for_status()
                if (resp.json().get("failure_probability_basis") or {}).get("model") == "agent":
                    break
                assert time.monotonic() < deadline, f"{version} not served 60 s after the promotion"
                time.sleep(0.5)
            caught: list[str] = []
            late: list[str] = []
            alarms: list[str] = []
            failing = [r for r in held if r.failed][:14]  # (the first trials of the held-out tasks: ~60 s in all)
            successful = [r for r in held if not r.failed][:14]
            for r in [*failing, *successful]:
                sid = "s-" + "".join(ch if ch.isalnum() else "-" for ch in r.run_id)
                steps = r.trace.steps
                by_message: dict[int, list[dict[str, Any]]] = {}
                for st in steps:
                    by_message.setdefault(st.source_index, []).append(st.model_dump(mode="json", exclude_none=True))
                first_at: int | None = None
                for batch in by_message.values():
                    resp = c.post(f"/v1/sessions/{sid}/steps", json={"steps": batch, "agent": AGENT})
                    assert resp.status_code == 200, resp.text
                    body = resp.json()
                    assert body["failure_probability_basis"]["model"] == "agent"
                    risk = [f for f in body["failures"] if f["kind"] == "at_risk"]
                    if risk and first_at is None:
                        first_at = risk[0]["step"]
                where = f"{r.run_id} ({len(steps)} steps): " + ("none" if first_at is None else f"step {first_at}")
                if r.failed:
                    (caught if first_at is not None and first_at < 0.75 * len(steps) else late).append(where)
                elif first_at is not None:
                    alarms.append(where)
    finally:
        server.stop()
    print(f"failing sessions: {len(caught)} of {len(failing)} got at_risk before their last quarter; missed or late: "
          f"{late}")
    print(f"successful sessions: {len(alarms)} of {len(successful)} false alarms: {alarms}")
    # measured (148 runs posted, the first 14 + 14 held-out sessions): with the point set for 10 % of successful
    # runs at half the run (2026-12-05) 7 of 14 failing sessions warned before their last quarter and 4 of 14
    # successful ones warned (29 %: the point was read at one prefix and fired at any step). Set on each
    # successful run's highest out-of-fold score over every tenth of the run, at its 5 % quantile (2026-12-06
    # morning): 2 of 14 failing (both in their last quarter) and 1 of 14 successful. As a 90 % tolerance bound
    # for 5 % (since 2026-12-06 noon): 59 successful training runs place it above every one of them, and none
    # of the 28 sessions is warned. The early warning is precise first; what this test holds is that it stays so
    warned = len(caught) + sum(not w.endswith(": none") for w in late)
    assert len(alarms) <= 2, f"more than 2 of {len(successful)} successful sessions got at_risk: {alarms}"
    assert warned >= len(alarms), f"at_risk warned {warned} failing and {len(alarms)} successful sessions"
