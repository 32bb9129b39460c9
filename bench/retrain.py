"""``triage retrain`` end to end on every developer set: K labelled runs over HTTP → agent model → hot swap.

For each real set with successful runs (Who&When is all failed: localisation only):

1. K labelled runs of whole tasks (seeded task order) are **posted through the HTTP API** of a real
   ``triage serve`` (``POST /v1/diagnose`` with ``options.agent`` = the set, ``POST /v1/traces/{id}/labels``
   ``{"failed": …}`` as a task checker would), one tenant per set; ``--no-task-ids`` leaves
   ``metadata.task_id`` out (the gate then groups by near-duplicate opening requests);
2. ``triage retrain --tenant T --agent <set>`` (the CLI, a subprocess) fits the agent model, gates it
   (grouped CV against zero-shot and both cheap learners) and registers it; when the gate keeps
   zero-shot, ``triage model promote`` activates it anyway (the hot swap is what is measured);
3. the server swaps it in without a restart (``TRIAGE_MODEL_POLL_S=1``); every held-out run (the other
   tasks, up to ``--held``) is posted to ``/v1/diagnose`` and its served ``failure_probability``
   compared with the offline model's score of the trace as stored (redacted) with the same prior:
   the largest difference must be ≤ 1e-4; the served AUROC of the agent model and of zero-shot on
   those runs is printed beside the gate's figures.

Then the cost: ``triage retrain`` of ``--timing-runs`` (1,000) labelled runs of one agent (the sets'
runs pooled under one name), twice — cold, then with the zero-shot cache warm. When the served
candidate reads the encoder block, the runs' step vectors are first stored by ``triage encode-runs``'s
backfill (timed, with the bytes a stored run takes), both retrains read them (the count of runs they
encoded is printed: 0), and a third retrain without them times the re-encoding apart; the registered
artefact's size is printed.

``--served N``: retrain with ``params.yaml``'s ``learning_curve`` candidate ``N`` instead of its
``served`` one (a copy of the file is written under ``--data``), e.g. an encoder candidate.

Writes ``reports/retrain.json``; prints a table. Run (about 10 minutes on 2 shared cores)::

    .venv/bin/python bench/retrain.py --data /tmp/bench-retrain
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.service import Server  # noqa: E402

SETS = ("tau_airline", "tau2", "agentprocessbench", "swe", "webshop", "reflexion_hotpotqa")


def _draw(runs: list[Any], k: int, seed: int) -> tuple[list[Any], list[Any]]:
    """K runs of whole tasks in a seeded task order (the last task cut to fit); the other tasks' runs. K is
    at most 80 % of the set ("all where fewer", as the learning curve): a fifth of the tasks stays held out."""
    k = min(k, int(0.8 * len(runs)))
    tasks = sorted({r.group for r in runs})
    order = np.random.default_rng(seed).permutation(len(tasks))
    out: list[Any] = []
    used: set[str] = set()
    for j in order:
        out += [r for r in runs if r.group == tasks[j]]
        used.add(tasks[j])
        if len(out) >= k:
            break
    return out[:k], [r for r in runs if r.group not in used]


def _env(data: Path) -> dict[str, str]:
    return {**os.environ, "TRIAGE_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}


PARAMS = ROOT / "params.yaml"  # the parameters file retrains read (--served writes a copy)


def _triage(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "serve.cli.main", *args], cwd=ROOT,
                          env={**_env(data), "TRIAGE_PARAMS_PATH": str(PARAMS)},
                          capture_output=True, text=True, timeout=3600)


def served_params(data: Path, served: int) -> Path:
    """A copy of ``params.yaml`` whose ``learning_curve.served`` is ``served``."""
    import yaml

    d = yaml.safe_load(PARAMS.read_text(encoding="utf-8"))
    d["learning_curve"]["served"] = served
    out = data / f"params-served-{served}.yaml"
    out.write_text(yaml.safe_dump(d, sort_keys=False), encoding="utf-8")
    return out


def _post(client: Any, runs: list[Any], agent: str, task_ids: bool) -> None:
    for r in runs:
        t = r.trace.model_copy(deep=True)
        t.labels = None
        t.metadata = {**t.metadata, **({"task_id": r.group} if task_ids else {})}
        client.post("/v1/diagnose", json={"trace": t.model_dump(mode="json", exclude_none=True),
                                          "options": {"agent": agent}}).raise_for_status()
        client.post(f"/v1/traces/{t.id}/labels", json={"failed": r.failed, "author": "checker",
                                                       "author_type": "checker"}).raise_for_status()


def one_set(server: Server, data: Path, name: str, k: int, held_max: int, seed: int, task_ids: bool) -> dict[str, Any]:
    import httpx

    from model.core.metrics import auroc
    from model.core.schema import Trace
    from model.data.realdata import load_source
    from model.scoring.agent_registry import Registry

    runs = load_source(name)
    train, held = _draw(runs, k, seed)
    held = held[:held_max]
    tenant = name.replace("_", "-")
    headers = {"Authorization": f"Bearer {server.keys[tenant]}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=120) as c:
        t0 = time.perf_counter()
        _post(c, train, name, task_ids)
        post_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = _triage(data, "retrain", "--tenant", tenant, "--agent", name)
        retrain_s = time.perf_counter() - t0
        if out.returncode not in (0, 1):
            return {"set": name, "error": out.stderr[-1500:] + out.stdout[-500:]}
        reg = Registry(data / "models")
        mv = reg.versions(tenant, name)[-1]
        gate = mv.summary.get("gate", {})
        if out.returncode == 1:
            p = _triage(data, "model", "promote", mv.version, "--tenant", tenant, "--agent", name)
            if p.returncode != 0:
                return {"set": name, "error": p.stderr[-1500:]}
        model = reg.load(tenant, name, mv.version)
        t0 = time.perf_counter()
        while True:  # the hot swap: the first answer from the new version
            t = held[0].trace.model_copy(deep=True)
            t.labels = None
            t.id = f"swap-{time.monotonic_ns()}"
            body = c.post("/v1/diagnose", json={"trace": t.model_dump(mode="json", exclude_none=True),
                                                "options": {"agent": name}}).json()
            if (body.get("failure_probability_basis") or {}).get("model") == "agent" or time.perf_counter() - t0 > 30:
                break
            time.sleep(0.2)
        swap_s = time.perf_counter() - t0
        diffs, served, zero, y = [], [], [], []
        for r in held:
            t = r.trace.model_copy(deep=True)
            t.labels = None
            body = c.post("/v1/diagnose", json={"trace": t.model_dump(mode="json", exclude_none=True),
                                                "options": {"agent": name}}).json()
            basis = body["failure_probability_basis"]
            stored = Trace.model_validate(c.get(f"/v1/traces/{t.id}").json()["trace"])
            offline = model.score(stored, prior=basis["zero_shot_probability"])
            diffs.append(abs(offline - body["failure_probability"]))
            served.append(body["failure_probability"])
            zero.append(basis["zero_shot_probability"] if basis["zero_shot_probability"] is not None else 0.5)
            y.append(float(r.failed))
    ya = np.array(y)
    est = gate.get("estimate", {})
    return {"set": name, "k": len(train), "failed": sum(r.failed for r in train), "held": len(held),
            "learner": str(gate.get("estimate", {}).get("served", "agent")),
            "post_s": post_s, "retrain_s": retrain_s, "swap_s": swap_s, "promoted_by_gate": out.returncode == 0,
            "gate": {m: (est.get(m) or {}).get("auroc") for m in ("agent", "zero-shot", "tfidf", "length")},
            "served_auroc": auroc(ya, np.array(served)), "zero_shot_auroc": auroc(ya, np.array(zero)),
            "max_abs_diff": max(diffs) if diffs else None}


def timing(data: Path, n: int) -> dict[str, Any]:
    """``triage retrain`` of ``n`` labelled runs of one agent, cold then warm (in process, on the store);
    with the encoder block: the backfill first, and a retrain without stored vectors apart."""
    from model.core.options import DiagnoseOptions
    from model.data.realdata import load_source
    from model.diagnosis.diagnoser import Diagnoser
    from model.scoring.encoder import shared_encoder
    from serve.schemas import LabelRequest
    from serve.services.encodings import encode_runs
    from serve.services.retrain import model_config, retrain
    from serve.settings import Settings
    from serve.wiring import build_service

    settings = Settings(data_dir=data / "timing", params_path=PARAMS)
    config, _ = model_config(PARAMS)
    svc = build_service(settings, Diagnoser())
    pool = [r for s in SETS for r in load_source(s)]
    runs, extra = pool[:n], pool[n:][::7][:60]  # and 60 others, served by the encoder model (when it is read)
    for r in runs:
        t = r.trace.model_copy(deep=True)
        t.labels = None
        t.metadata = {**t.metadata, "task_id": f"{r.source}:{r.group}"}
        svc.diagnose("timing", t, DiagnoseOptions(agent="many"))
        svc.add_label("timing", t.id, LabelRequest(failed=r.failed, author="checker", author_type="checker"))
    out: dict[str, Any] = {"runs": len(runs), "encoder_weight": config.encoder_weight}
    st = svc.stores
    if config.encoder_weight > 0:
        res_e = encode_runs(st.encodings, st.traces, shared_encoder(), tenant="timing")
        stored, size = st.encodings.stored_bytes("timing")
        out.update(encode_s=res_e.seconds, encoded_runs=res_e.encoded, encoded_steps=res_e.steps,
                   bytes_per_run=size / max(1, stored), steps_per_run=sum(len(r.trace.steps) for r in runs) / len(runs))
    for label in ("cold", "warm"):
        res = retrain(st.activations, st.labels, settings, "timing", promote=False, encodings=st.encodings)
        out[f"{label}_s"] = res.seconds
        out[f"{label}_cache"] = res.cache
    if config.encoder_weight > 0:
        res = retrain(st.activations, st.labels, settings, "timing", promote=False)  # no stored vectors
        out.update(reencode_s=res.seconds, reencode_cache=res.cache)
    if res.models:
        out["artefact_bytes"] = (res.models[0].version.path / "agentmodel.json").stat().st_size
        out["learner"] = res.models[0].learner
    if config.encoder_weight > 0:
        out.update(encoder_model(svc, settings, config, runs, extra))
    st.db.dispose()
    return out


def encoder_model(svc: Any, settings: Any, config: Any, runs: list[Any], held: list[Any]) -> dict[str, Any]:
    """The agent model with the encoder block on the timing runs (fitted from the stored vectors, whatever
    learner the gate served): its artefact's size, and, served by the service (in process) for ``held``
    runs, the largest difference from the offline model's score of the stored run."""
    from model.core.options import DiagnoseOptions
    from model.scoring.agent_registry import Registry
    from model.scoring.agentmodel.model import AgentModel
    from model.training.agentmodel.cv import group_runs
    from serve.services.agent_models import build_models
    from serve.services.retrain import feature_cache
    from serve.services.retrain_plan import labelled_runs

    st = svc.stores
    lr = labelled_runs(st.labels, "timing")
    cache, _ = feature_cache(config, lr, "timing", st.encodings)
    t0 = time.perf_counter()
    model = AgentModel.fit([r.trace for r in lr], [r.failed for r in lr],
                           group_runs([r.trace for r in lr], [r.task for r in lr]), config=config, cache=cache)
    fit_s = time.perf_counter() - t0
    mv = Registry(settings.resolved_model_registry).save("timing", "many", model, parent=None, card="bench",
                                                         report={}, data={})
    st.activations.activate_model("timing", mv.version, actor="bench/retrain.py", agent="many")
    svc.diagnoses.models = build_models(settings, st.activations)
    diffs = []
    for r in held:
        t = r.trace.model_copy(deep=True)
        t.labels = None
        t.id = f"held-{t.id}"
        resp = svc.diagnose("timing", t, DiagnoseOptions(agent="many"))
        basis = resp.failure_probability_basis
        assert basis is not None and basis.model == "agent", basis
        stored = svc.stored_trace("timing", t.id)
        diffs.append(abs(model.score(stored, prior=basis.zero_shot_probability) - float(resp.failure_probability)))
    return {"encoder_model_bytes": (mv.path / "agentmodel.json").stat().st_size, "encoder_model_fit_s": fit_s,
            "encoder_model_cv_auroc": model.card_.get("cv_auroc"), "encoder_held": len(held),
            "encoder_max_abs_diff": max(diffs) if diffs else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="a fresh folder for the server's data")
    ap.add_argument("--k", type=int, default=100, help="labelled runs posted per set")
    ap.add_argument("--held", type=int, default=60, help="held-out runs scored per set")
    ap.add_argument("--sets", nargs="*", default=list(SETS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-task-ids", action="store_true", help="post runs without metadata.task_id")
    ap.add_argument("--timing-runs", type=int, default=1000, help="0: skip the retrain timing")
    ap.add_argument("--served", type=int, default=None,
                    help="retrain with this learning_curve candidate of params.yaml (default: its served one)")
    args = ap.parse_args()
    args.data.mkdir(parents=True, exist_ok=True)
    global PARAMS
    if args.served is not None:
        PARAMS = served_params(args.data, args.served)
    tenants = tuple(s.replace("_", "-") for s in args.sets)
    rows = []
    if tenants:
        server = Server(1, args.data, None, 2, tenants=tenants, extra_env=["TRIAGE_MODEL_POLL_S=1"])
        try:
            for s in args.sets:
                row = one_set(server, args.data, s, args.k, args.held, args.seed, not args.no_task_ids)
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            server.stop()
    print(f"\n{'set':<20} {'K':>4} {'held':>4} {'gate: agent':>11} {'zero-shot':>9} {'TF-IDF':>7} {'length':>7} "
          f"{'promoted':>8} {'learner':>7} {'served AUROC':>12} {'zero-shot':>9} {'max |served-offline|':>20} "
          f"{'retrain s':>9} {'swap s':>6}")
    for r in rows:
        if "error" in r:
            print(f"{r['set']:<20} error: {r['error'][:300]}")
            continue
        g = r["gate"]

        def f(x: Any) -> str:
            return "-" if x is None else f"{x:.3f}"

        print(f"{r['set']:<20} {r['k']:>4} {r['held']:>4} {f(g['agent']):>11} {f(g['zero-shot']):>9} {f(g['tfidf']):>7} "
              f"{f(g['length']):>7} {'yes' if r['promoted_by_gate'] else 'no':>8} {r['learner']:>7} {f(r['served_auroc']):>12} "
              f"{f(r['zero_shot_auroc']):>9} {r['max_abs_diff']:>20.2e} {r['retrain_s']:>9.1f} {r['swap_s']:>6.1f}")
    report: dict[str, Any] = {"sets": rows, "k": args.k, "task_ids": not args.no_task_ids}
    if args.timing_runs:
        report["timing"] = timing(args.data, args.timing_runs)
        tm = report["timing"]
        print(f"\nretrain of {tm['runs']} labelled runs of one agent (encoder_weight {tm['encoder_weight']}): cold "
              f"{tm['cold_s']:.1f} s, warm {tm['warm_s']:.1f} s (target <= 60 s warm); load average "
              f"{os.getloadavg()[0]:.2f}")
        if tm["encoder_weight"] > 0:
            print(f"  stored encodings: the backfill encoded {tm['encoded_runs']} runs ({tm['encoded_steps']} steps) in "
                  f"{tm['encode_s']:.1f} s; {tm['bytes_per_run'] / 1e3:.1f} kB a run ({tm['steps_per_run']:.1f} steps); "
                  f"the retrains encoded {tm['warm_cache'].get('encoded_runs_missing')} runs; without stored "
                  f"vectors (re-encoding every run) {tm['reencode_s']:.1f} s")
        if "artefact_bytes" in tm:
            print(f"  the registered artefact ({tm['learner']}): {tm['artefact_bytes'] / 1e6:.2f} MB (target <= 10 MB)")
        if "encoder_model_bytes" in tm:
            print(f"  the agent model with the encoder block, fitted from the stored vectors in {tm['encoder_model_fit_s']:.1f} s: "
                  f"{tm['encoder_model_bytes'] / 1e6:.2f} MB; served (in process) on {tm['encoder_held']} other runs: "
                  f"max |served - offline| {tm['encoder_max_abs_diff']:.2e} (target <= 1e-4)")
    (ROOT / "reports").mkdir(exist_ok=True)
    (ROOT / "reports" / "retrain.json").write_text(json.dumps(report, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
