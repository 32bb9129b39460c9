"""``triage retrain`` on real sets posted as a stranger would: no agent name, no task id, run-level labels only.

For each set (default τ-airline, AgentProcessBench, SWE, WebShop) in a tenant of its own, every run
is stored through the store's API (``put_trace`` + ``add_label``, what ``POST /v1/diagnose`` and
``POST /v1/traces/{id}/labels`` write) with what names the set or the label stripped: ``trace.id``
(replaced by a hash), ``task_type``, ``labels``, ``metadata`` (``task_id`` among it); its agent is what
:func:`model.core.agents.resolve_agent` makes of the stripped run. Then ``triage retrain --tenant <set>
--json`` runs as a subprocess (the CLI a user runs), and this prints per set: runs, task groups, the
gate's grouped-CV AUROC of the agent model / TF-IDF / length fit / zero-shot, which learner is served,
the exit code, and whether stderr holds a traceback (it must not). ``--task-ids`` posts each run's true
task as ``metadata.task_id`` instead (the reference: the gate with exact task groups).

    PYTHONPATH=$PWD .venv/bin/python bench/retrain_unnamed.py --data /tmp/bench-retrain-unnamed
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETS = ("tau_airline", "agentprocessbench", "swe", "webshop")


def store_set(db_url: str, tenant: str, name: str, task_ids: bool = False) -> int:
    """Store the set's runs, stripped, with their run-level labels; returns how many."""
    from model.core.agents import resolve_agent
    from model.data.realdata import load_source
    from serve.store import Stores

    store = Stores.at(db_url)
    store.db.upgrade()
    runs = load_source(name)
    for r in runs:
        t = r.trace.model_copy(deep=True)
        t.labels, t.task_type, t.metadata = None, None, {"task_id": r.group} if task_ids else {}
        t.id = "run-" + hashlib.sha256(r.trace.id.encode()).hexdigest()[:16]
        with store.db.write() as db:
            store.traces.put_trace(db, tenant=tenant, trace_id=t.id, trace=t.model_dump(mode="json", exclude_none=True),
                            response={}, session_id=None, task_type=None, agent=resolve_agent(t, None))
        store.labels.add_label(tenant, t.id, failed=r.failed, author="checker", author_type="checker")
    store.db.dispose()
    return len(runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="A fresh working folder (TRIAGE_DATA_DIR).")
    ap.add_argument("--sets", nargs="+", default=list(SETS))
    ap.add_argument("--task-ids", action="store_true",
                    help="Post each run's true task as metadata.task_id (the reference: what exact task groups give).")
    args = ap.parse_args(argv)
    args.data.mkdir(parents=True, exist_ok=True)
    db_url = f"sqlite:///{args.data / 'triage.db'}"
    env = {**os.environ, "TRIAGE_DATA_DIR": str(args.data), "TRIAGE_DATABASE_URL": db_url,
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    rows: list[dict[str, Any]] = []
    for name in args.sets:
        tenant = name.replace("_", "-")
        n = store_set(db_url, tenant, name, args.task_ids)
        out = subprocess.run([sys.executable, "-m", "serve.cli.main", "retrain", "--tenant", tenant, "--json"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
        tb = "Traceback" in out.stderr or "Traceback" in out.stdout
        rec = json.loads(out.stdout[out.stdout.find("{"):]) if "{" in out.stdout else {}
        for m in rec.get("models", []):
            e = m["gate"]["estimate"]
            rows.append({"set": name, "runs": n, "model": m["agent"], "groups": m["groups"], "folds": e.get("cv_folds"),
                         **{k: e[k]["auroc"] for k in ("agent", "tfidf", "length", "zero-shot")},
                         "served": m["learner"], "promoted": m["promoted"], "exit": out.returncode, "traceback": tb})
        for r in rec.get("refusals", []):
            rows.append({"set": name, "runs": n, "model": r["agent"], "refused": r["code"], "message": r["message"],
                         "exit": out.returncode, "traceback": tb})
        if not rec:
            rows.append({"set": name, "runs": n, "exit": out.returncode, "traceback": tb, "stderr": out.stderr[-500:]})
    (args.data / "retrain_unnamed.json").write_text(json.dumps(rows, indent=1))
    print(f"{'set':<18} {'runs':>4} {'model':<10} {'groups':>6} {'folds':>5} {'agent':>6} {'tfidf':>6} {'length':>6} "
          f"{'zero':>6}  {'served':<7} promoted exit traceback")
    for r in rows:
        if "agent" in r:
            print(f"{r['set']:<18} {r['runs']:>4} {r['model']:<10} {r['groups']:>6} {r['folds']:>5} {r['agent']:>6.3f} "
                  f"{r['tfidf']:>6.3f} {r['length']:>6.3f} {r['zero-shot']:>6.3f}  {r['served']:<7} "
                  f"{str(r['promoted']):<8} {r['exit']:>4} {r['traceback']}")
        else:
            print(f"{r['set']:<18} {r['runs']:>4} {r.get('model', '-'):<10} refused {r.get('refused')}: "
                  f"{r.get('message', r.get('stderr', ''))} exit {r['exit']} traceback {r['traceback']}")
    return 1 if any(r["traceback"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
