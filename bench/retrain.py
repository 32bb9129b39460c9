"""The learning curve of ``triage retrain`` on an agent the base model never saw (τ-airline).

1. A base run scorer fitted on the real sets' training parts **without τ-airline** is registered and
   activated for every bench tenant: it is the champion, and the K = 0 point.
2. For K = 25, 50, 100 (and ``--draws`` draws of each): K labelled runs of τ-airline's training
   tasks, drawn by task, are **posted through the HTTP API** of a real ``triage serve``
   (``POST /v1/diagnose`` stores the run, ``POST /v1/traces/{id}/labels`` ``{"failed": …}`` labels
   it, as a task checker would, with ``source_index`` where τ-bench's expected actions locate the
   failure), one tenant per (K, draw);
3. ``triage retrain --tenant T --exclude-set tau_airline`` (the CLI, a subprocess) trains the
   challenger on them, gates it and registers it;
4. every K is scored on the same held-out τ-airline tasks (its fixed test split, never posted):
   AUROC with a bootstrap interval over tasks, the paired gain over K = 0, false alarms and recall
   at the model's operating point, exact localisation of the failing message; and on the other sets'
   fixed test splits (the paired difference to K = 0).

Writes ``reports/retrain.json`` and ``docs/figures/retrain-curve.png``; prints a table. Also the
serve-time cost per step of the tenant head (hashed text features + dot product).

Run (about 12 minutes on 2 shared cores; a second run with the same --data reuses the feature cache)::

    .venv/bin/python bench/retrain.py --data /tmp/bench-retrain
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.service import Server  # noqa: E402

SET = "tau_airline"
KS = (0, 25, 50, 100)


def _draw(train: list[Any], k: int, seed: int) -> list[Any]:
    """K runs of whole tasks in a seeded task order (the last task cut to fit)."""
    tasks = sorted({r.group for r in train})
    order = np.random.default_rng(seed).permutation(len(tasks))
    out: list[Any] = []
    for j in order:
        out += [r for r in train if r.group == tasks[j]]
        if len(out) >= k:
            break
    return out[:k]


def _post(server: Server, tenant: str, runs: list[Any], tag: str) -> None:
    import httpx

    headers = {"Authorization": f"Bearer {server.keys[tenant]}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as c:
        for r in runs:
            t = r.trace.model_copy(deep=True)
            t.labels = None
            t.id = f"{tag}-{r.run_id}"
            t.metadata = {**t.metadata, "task_id": r.group}
            resp = c.post("/v1/diagnose", json={"trace": t.model_dump(mode="json", exclude_none=True)})
            resp.raise_for_status()
            # the verdict, and where it went wrong when τ-bench's expected actions say (its derived step)
            body: dict[str, Any] = {"failed": r.failed, "author": "tau-checker", "author_type": "checker"}
            if r.failed and r.fail_source_index is not None:
                body["source_index"] = r.fail_source_index
            lab = c.post(f"/v1/traces/{t.id}/labels", json=body)
            lab.raise_for_status()


def _metrics(scorer: Any, test: list[Any], boots: list[np.ndarray], base_probs: np.ndarray | None) -> dict[str, Any]:
    from model.runscore.evaluate import _ci, rate_ci
    from model.runscore.model import auroc

    y = np.array([int(e.failed) for e in test])
    scored = [scorer.score_example(e) for e in test]
    p = np.array([s[0] for s in scored])
    flag = p >= scorer.threshold
    loc = [(k, e) for k, e in enumerate(test) if e.failed and e.fail_source_index is not None and e.units]
    exact = [float(e.units[int(np.argmax(scored[k][1]))].source_index == e.fail_source_index) for k, e in loc]
    out: dict[str, Any] = {
        "auroc": round(auroc(y, p), 4), "boot": [auroc(y[b], p[b]) for b in boots],
        "false_alarms": rate_ci(int(flag[y == 0].sum()), int((y == 0).sum())),
        "recall": rate_ci(int(flag[y == 1].sum()), int((y == 1).sum())),
        "localisation_exact": rate_ci(int(sum(exact)), len(exact)),
        "probs": p,
    }
    if base_probs is not None:
        out["gain_boot"] = [auroc(y[b], p[b]) - auroc(y[b], base_probs[b]) for b in boots]
    out["ci"] = _ci(out["boot"])
    return out


def _serve_cost(scorer: Any, runs: list[Any], repeat: int = 7) -> dict[str, Any]:
    """Microseconds per step of RunScorer.score with and without the tenant head."""
    from model.runscore.head import text_vector

    head = scorer.head_
    steps = sum(len(r.trace.steps) for r in runs)
    best = {"without_head": float("inf"), "with_head": float("inf"), "text_vector": float("inf")}
    for _ in range(repeat):  # interleaved, best of `repeat`: the machine is shared
        for name, h in (("without_head", None), ("with_head", head)):
            scorer.head_ = h
            t0 = time.perf_counter()
            for r in runs:
                scorer.score(r.trace)
            best[name] = min(best[name], time.perf_counter() - t0)
        t0 = time.perf_counter()
        for r in runs:
            text_vector(r.trace)
        best["text_vector"] = min(best["text_vector"], time.perf_counter() - t0)
    scorer.head_ = head
    res = {k: round(v / steps * 1e6, 2) for k, v in best.items()}
    return {"us_per_step": res, "head_us_per_step": round(max(0.0, res["with_head"] - res["without_head"]), 2),
            "runs": len(runs), "steps": steps}


def _plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = report["points"]
    ks = [p["k"] for p in pts]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(ks, [p["auroc"] for p in pts],
                yerr=[[p["auroc"] - p["ci"][0] for p in pts], [p["ci"][1] - p["auroc"] for p in pts]],
                marker="o", capsize=4, label="held-out τ-airline tasks")
    for p in pts:
        for a in p.get("draws", []):
            ax.scatter([p["k"]], [a], color="grey", s=10, zorder=3)
    for name, fx in report["fixed_splits"].items():
        ax.plot(ks, [fx["auroc"][str(k)] for k in ks], linestyle="--", marker=".", label=f"fixed split {name}")
    ax.axhline(0.5, color="black", linewidth=0.6)
    ax.set_xlabel("labelled τ-airline runs posted (K)")
    ax.set_ylabel("AUROC of failure_probability")
    ax.set_ylim(0.3, 1.0)
    ax.set_title("triage retrain: learning curve on an unseen agent")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=5, help="draws of the K runs per K (tenants)")
    ap.add_argument("--ks", default=",".join(map(str, KS)))
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "retrain.json")
    ap.add_argument("--figure", type=Path, default=ROOT / "docs" / "figures" / "retrain-curve.png")
    ap.add_argument("--data", type=Path, default=None, help="working folder (default: a temp one; its "
                    "feature cache makes a second run fast)")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the server on the way out
    ks = [int(k) for k in a.ks.split(",")]

    from model.realdata import SOURCES, load_all, load_source, loso_family
    from model.registry import Registry
    from model.runscore.evaluate import _ci, _group_boot
    from model.runscore.model import RunScorer, auroc
    from model.runscore.retrain import FeatureCache, base_training, fixed_splits
    from model.runscore.train import RunScoreConfig, fixed_test
    from serve.store import Store

    data = a.data or Path(tempfile.mkdtemp(prefix="bench-retrain-"))
    data.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    cache = FeatureCache(data / "cache" / "runscore")
    others = tuple(s for s in SOURCES if loso_family(s) != loso_family(SET))  # τ² airline is τ-bench's family
    print("features of the real sets (cached under the working folder) ...", flush=True)
    base_all = cache.examples(load_all(None, others))
    tau = load_source(SET)
    tau_train = [r for r in tau if not fixed_test(r.source, r.group)]
    tau_test_runs = [r for r in tau if fixed_test(r.source, r.group)]
    tau_test = cache.examples(tau_test_runs)
    params = RunScoreConfig.from_params(ROOT / "params.yaml").as_params()
    base_scorer = RunScorer(**params).fit(base_training(base_all))
    base_scorer.meta_["bench"] = f"fitted without {SET} (bench/retrain.py)"
    fixed = fixed_splits(base_all, exclude=(SET,))
    print(f"base model without {SET}: {len(base_training(base_all))} runs; held-out {SET}: {len(tau_test)} runs "
          f"of {len({e.group for e in tau_test})} tasks; {len(tau_train)} training runs to draw from", flush=True)

    tenants = [f"airline-k{k}-d{d}" for k in ks if k for d in range(a.draws)]
    server = Server(1, data, tenants=tuple(tenants) or ("bench",), limits="off")
    registry = Registry(data / "models")
    store = Store(f"sqlite:///{data / 'triage.db'}")
    champion = {t: registry.save(t, base_scorer, parent=None, card=f"# base model without {SET}\n",
                                 report={"bench": "champion"}, data={}).version for t in tenants}
    for t, v in champion.items():
        store.activate_model(t, v, actor="bench/retrain.py")

    rng = np.random.default_rng(0)
    boots = _group_boot([e.group for e in tau_test], rng)
    base_m = _metrics(base_scorer, tau_test, boots, None)
    fixed_boots = {s: _group_boot([e.group for e in ex], np.random.default_rng(1)) for s, ex in fixed.items()}
    fixed_base = {s: np.array([base_scorer.score_example(e)[0] for e in ex]) for s, ex in fixed.items()}
    points: list[dict[str, Any]] = []
    fixed_out: dict[str, dict[str, Any]] = {s: {"runs": len(ex), "failed": int(sum(e.failed for e in ex)),
                                                "auroc": {}, "diff_vs_k0": {}} for s, ex in fixed.items()}
    env = {**os.environ, "TRIAGE_DATA_DIR": str(data), "TRIAGE_AUTH": "on"}
    try:
        for k in ks:
            if k == 0:
                m = base_m
                points.append({"k": 0, "auroc": m["auroc"], "ci": m["ci"], "draws": [m["auroc"]],
                               "false_alarms": m["false_alarms"], "recall": m["recall"],
                               "localisation_exact": m["localisation_exact"], "gate": None})
                for s, ex in fixed.items():
                    y = np.array([int(e.failed) for e in ex])
                    fixed_out[s]["auroc"]["0"] = round(auroc(y, fixed_base[s]), 4)
                continue
            per_draw = []
            for d in range(a.draws):
                tenant = f"airline-k{k}-d{d}"
                runs = _draw(tau_train, k, seed=1000 * k + d)
                t0 = time.monotonic()
                _post(server, tenant, runs, tenant)
                t_post = time.monotonic() - t0
                t0 = time.monotonic()
                proc = subprocess.run([sys.executable, "-m", "serve.cli", "retrain", "--tenant", tenant,
                                       "--exclude-set", SET], cwd=ROOT, env=env, capture_output=True, text=True)
                t_retrain = time.monotonic() - t0
                if proc.returncode not in (0, 1):
                    refused = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "?"
                    print(f"K={k} draw {d}: retrain refused: {refused}", flush=True)
                    per_draw.append({"refused": refused, "post_s": round(t_post, 1),
                                     "retrain_s": round(t_retrain, 1)})
                    continue
                newest = registry.versions(tenant)[-1]
                scorer = registry.load(tenant, newest.version)
                m = _metrics(scorer, tau_test, boots, base_m["probs"])
                g = newest.summary.get("gate", {})
                print(f"K={k} draw {d}: AUROC {m['auroc']:.3f} [{m['ci'][0]:.3f}, {m['ci'][1]:.3f}]; gate "
                      f"{'promoted' if g.get('promote') else 'kept the champion'} ({g.get('reason')}); "
                      f"post {t_post:.0f} s, retrain {t_retrain:.0f} s", flush=True)
                fx = {}
                for s, ex in fixed.items():
                    y = np.array([int(e.failed) for e in ex])
                    pc = np.array([scorer.score_example(e)[0] for e in ex])
                    fx[s] = {"auroc": auroc(y, pc), "diff_boot": [auroc(y[b], pc[b]) - auroc(y[b], fixed_base[s][b])
                                                                for b in fixed_boots[s]]}
                per_draw.append({"m": m, "gate": g, "fixed": fx, "post_s": round(t_post, 1),
                                 "retrain_s": round(t_retrain, 1), "version": newest.version, "scorer": scorer})
            ok = [x for x in per_draw if "m" in x]
            if not ok:
                points.append({"k": k, "auroc": None, "ci": [None, None], "refused": [x["refused"] for x in per_draw]})
                continue
            aurocs = [x["m"]["auroc"] for x in ok]
            boot = np.mean([x["m"]["boot"] for x in ok], axis=0)  # the draws' mean, per task resample
            gain = np.mean([x["m"]["gain_boot"] for x in ok], axis=0)

            def pooled(key: str, ok: list[dict[str, Any]] = ok) -> dict[str, Any]:
                from model.runscore.evaluate import rate_ci
                hits = sum(x["m"][key]["hits"] for x in ok if x["m"][key]["n"])
                n = sum(x["m"][key]["n"] for x in ok)
                return rate_ci(hits, n)

            points.append({
                "k": k, "auroc": round(float(np.mean(aurocs)), 4), "ci": _ci(list(boot)), "draws": aurocs,
                "gain_vs_k0": {"diff": round(float(np.mean(aurocs)) - base_m["auroc"], 4), "ci": _ci(list(gain))},
                "false_alarms": pooled("false_alarms"), "recall": pooled("recall"),
                "localisation_exact": pooled("localisation_exact"),
                "gate": [{"version": x["version"], "promote": x["gate"].get("promote"),
                          "reason": x["gate"].get("reason")} for x in ok],
                "retrain_s": [x["retrain_s"] for x in per_draw], "post_s": [x["post_s"] for x in per_draw],
            })
            for s in fixed:
                fixed_out[s]["auroc"][str(k)] = round(float(np.mean([x["fixed"][s]["auroc"] for x in ok])), 4)
                db = np.mean([x["fixed"][s]["diff_boot"] for x in ok], axis=0)
                fixed_out[s]["diff_vs_k0"][str(k)] = {
                    "diff": round(fixed_out[s]["auroc"][str(k)] - fixed_out[s]["auroc"]["0"], 4), "ci": _ci(list(db))}
            last_scorer = ok[-1]["scorer"]
    finally:
        server.stop()
        store.dispose()
    cost = _serve_cost(last_scorer, tau_test_runs) if "last_scorer" in locals() else None
    report = {"set": SET, "points": points, "fixed_splits": fixed_out,
              "held_out": {"runs": len(tau_test), "failed": int(sum(e.failed for e in tau_test)),
                           "tasks": len({e.group for e in tau_test})},
              "draws": a.draws, "serve_cost": cost, "seconds": round(time.monotonic() - t_start, 1),
              "command": "python bench/retrain.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "generated": time.strftime("%Y-%m-%d")}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    _plot(report, a.figure)
    print(f"\n{'K':>4}  {'AUROC [95 % CI]':<24} {'gain vs K=0 [CI]':<24} {'false alarms':<13} {'recall':<8} "
          f"{'loc. exact':<10}")
    for p in points:
        if p["auroc"] is None:
            print(f"{p['k']:>4}  refused: {p['refused'][0]}")
            continue
        g = p.get("gain_vs_k0")
        gs = f"{g['diff']:+.3f} [{g['ci'][0]:+.3f}, {g['ci'][1]:+.3f}]" if g else "-"
        print(f"{p['k']:>4}  {p['auroc']:.3f} [{p['ci'][0]:.3f}, {p['ci'][1]:.3f}]     {gs:<24} "
              f"{100 * p['false_alarms']['rate']:>5.1f} %      {100 * p['recall']['rate']:>5.1f} %  "
              f"{p['localisation_exact']['rate']:.3f}")
    for s, fx in fixed_out.items():
        print(f"fixed split {s}: " + ", ".join(
            f"K={k} {v:.3f}" + (f" ({fx['diff_vs_k0'][k]['diff']:+.3f} [{fx['diff_vs_k0'][k]['ci'][0]:+.3f}, "
                                f"{fx['diff_vs_k0'][k]['ci'][1]:+.3f}])" if k in fx["diff_vs_k0"] else "")
            for k, v in fx["auroc"].items()))
    if cost:
        print(f"serve-time cost of the tenant head: {cost['head_us_per_step']} µs per step "
              f"({cost['us_per_step']})")
    print(f"-> {a.out}, {a.figure} ({report['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
