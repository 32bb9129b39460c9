"""The first week's figures from the answers ``bench/first_week.py`` stored, and ``reports/first_week.md``.

Agents are read from each answer's ``agent`` (schema 1.4); an answer without it (schema ≤ 1.3) is read by
``failure_probability_basis.agent`` and the report says so. Every figure names the phase it comes from.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.first_week_input import Run, local_trace, read_sets, stripped
from model.core.metrics import (
    AurocUnit,
    auroc,
    ece,
    group_bootstrap_interval,
    group_bootstrap_weights,
    percentile_interval,
)

#: Done-when thresholds (issue 31).
SHARE_MIN, PURITY_MIN, SMALLEST_MIN = 0.90, 0.95, 5
#: Runs of each inferred agent left out of the false-alarm counts. The streams' CUSUM warm-up
#: (``model/streams/cusum.py``: 100 observations) is not among them: a stream raises nothing while it warms
#: up, and every other cause (rules, the classifier, ``at_risk``) fires from an agent's first run, so every
#: run counts (τ²'s agents, with 40-80 runs, were never counted when their first 100 were left out).
WARMUP = 0
CHEAP = ("tfidf", "length")


def load(work: Path, phase: str) -> list[dict[str, Any]]:
    """A phase's answers; where the phase kept its agents (``agents.json``, or ``agents-<part>.json`` for
    the answers of that part), ``agent`` and ``basis_agent`` are the agent each run was under then (an alias
    followed: a stray merged by consolidation), the answer's own in ``agent_answered``."""
    path = work / phase / "answers.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break
    aliases: dict[str | None, dict[str, str]] = {}
    for listed in (work / phase).glob("agents*.json"):
        part = listed.stem.split("-", 1)[1] if "-" in listed.stem else None
        aliases[part] = {old: ag["key"] for ag in json.loads(listed.read_text(encoding="utf-8"))["agents"]
                         for old in ag.get("aliases") or []}
    for a in out:
        alias = aliases.get(a.get("part"), aliases.get(None))
        if alias is None:
            continue
        a["agent_answered"] = a.get("agent")
        for k in ("agent", "basis_agent"):
            if a.get(k) in alias:
                a[k] = alias[a[k]]
    return out


def inferred(a: dict[str, Any]) -> str:
    """The agent the service put the run under: ``agent`` when answered, else the basis's agent."""
    return str(a.get("agent") or a.get("basis_agent") or "?")


# ---- agents ------------------------------------------------------------------------------------------


def agent_figures(answers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per configuration the share of its runs in its largest inferred agent; per inferred agent its
    size and purity; the smallest agent; adjusted Rand; whether the done-when thresholds hold."""
    from sklearn.metrics import adjusted_rand_score

    ok = [a for a in answers if a.get("status") == 200]
    if not ok:
        return {"runs": 0}
    truth = [a["truth"] for a in ok]
    pred = [inferred(a) for a in ok]
    configs: dict[str, Any] = {}
    for c in sorted(set(truth)):
        cnt = Counter(p for t, p in zip(truth, pred, strict=True) if t == c)
        top, n = cnt.most_common(1)[0]
        configs[c] = {"runs": sum(cnt.values()), "largest_agent": top, "share": n / sum(cnt.values()),
                      "agents": len(cnt)}
    agents: dict[str, Any] = {}
    for p in sorted(set(pred)):
        cnt = Counter(t for t, q in zip(truth, pred, strict=True) if q == p)
        top, n = cnt.most_common(1)[0]
        agents[p] = {"runs": sum(cnt.values()), "majority": top, "purity": n / sum(cnt.values())}
    sources = Counter(str(a.get("agent_source")) for a in ok)
    return {
        "runs": len(ok), "configs": configs, "agents": agents,
        "smallest": min(v["runs"] for v in agents.values()),
        "ari": float(adjusted_rand_score(truth, pred)),
        "agent_field": sum(a.get("agent") is not None for a in ok), "sources": dict(sources),
        "pass": all(v["share"] >= SHARE_MIN for v in configs.values())
        and all(v["purity"] >= PURITY_MIN for v in agents.values())
        and min(v["runs"] for v in agents.values()) >= SMALLEST_MIN,
    }


def same_agent(json_answers: Sequence[dict[str, Any]], span_answers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Runs that got the same agent posted as JSON and as content-off spans (same server)."""
    j = {a["key"]: inferred(a) for a in json_answers if a.get("status") == 200}
    s = {a["key"]: inferred(a) for a in span_answers if a.get("status") == 200}
    both = sorted(set(j) & set(s))
    same = sum(j[k] == s[k] for k in both)
    return {"runs": len(both), "same": same}


# ---- task groups --------------------------------------------------------------------------------------


def task_figures(answers: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Same-task pair recall, groups vs true tasks and B-cubed F1 per set, when answers carry a task group."""
    ok = [a for a in answers if a.get("status") == 200 and a.get("task_group") is not None]
    if not ok:
        return None
    out: dict[str, Any] = {}
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in ok:
        by[a["set"]].append(a)
    for s, rows in sorted(by.items()):
        t = [r["task"] for r in rows]
        g = [str(r["task_group"]) for r in rows]
        pairs = same_pairs = 0
        for i in range(len(rows)):
            for j in range(i + 1, len(rows)):
                if t[i] == t[j]:
                    pairs += 1
                    same_pairs += g[i] == g[j]
        prec = rec = 0.0
        for i in range(len(rows)):
            gi = {k for k in range(len(rows)) if g[k] == g[i]}
            ti = {k for k in range(len(rows)) if t[k] == t[i]}
            prec += len(gi & ti) / len(gi)
            rec += len(gi & ti) / len(ti)
        prec, rec = prec / len(rows), rec / len(rows)
        out[s] = {"runs": len(rows), "tasks": len(set(t)), "groups": len(set(g)),
                  "pair_recall": same_pairs / pairs if pairs else float("nan"),
                  "bcubed_f1": 2 * prec * rec / (prec + rec) if prec + rec else 0.0}
    return out


# ---- zero-shot ---------------------------------------------------------------------------------------


def zero_shot_figures(answers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per set with both classes: AUROC of the served probability before any label (interval over
    tasks), the share of runs tied at one score, ECE vs the other sets' base rate."""
    ok = [a for a in answers if a.get("status") == 200 and a.get("p") is not None]
    out: dict[str, Any] = {}
    for s in sorted({a["set"] for a in ok}):
        rows = [a for a in ok if a["set"] == s]
        y = np.array([a["failed"] for a in rows], float)
        if y.min() == y.max():
            continue
        p = np.array([a["p"] for a in rows], float)
        others = np.array([a["failed"] for a in ok if a["set"] != s], float)
        base = float(others.mean()) if len(others) else 0.5
        lo, hi = group_bootstrap_interval(y, p, [a["task"] for a in rows])
        tied = Counter(np.round(p, 6).tolist()).most_common(1)[0][1] / len(p)
        out[s] = {"runs": len(rows), "failed": int(y.sum()), "auroc": auroc(y, p), "interval": [lo, hi],
                  "tied": tied, "ece": ece(y, p), "ece_base": ece(y, np.full_like(y, base)), "base": base}
    return out


# ---- false alarms ------------------------------------------------------------------------------------


def alarm_figures(answers: Sequence[dict[str, Any]], part: str | None = None) -> dict[str, Any]:
    """Per set, past each inferred agent's first ``WARMUP`` runs:
    successful runs answered ``healthy`` false (any cause) and failed runs caught; with ``part``, only the
    answers of that part count (the others, posted before, still warm the streams up)."""
    seen: Counter[str] = Counter()
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in answers:
        if a.get("status") != 200:
            continue
        ag = inferred(a)
        seen[ag] += 1
        if seen[ag] > WARMUP and (part is None or a.get("part") == part):
            rows[a["set"]].append(a)
    out = {}
    for s, rs in sorted(rows.items()):
        ok = [a for a in rs if not a["failed"]]
        bad = [a for a in rs if a["failed"]]
        fa = [a for a in ok if a.get("healthy") is False]
        out[s] = {"successful": len(ok), "false_alarms": len(fa), "failed": len(bad),
                  "caught": sum(a.get("healthy") is False for a in bad),
                  "unknown": sum(a.get("healthy") is None for a in rs),
                  "causes": dict(Counter(k for a in fa for k in a.get("kinds") or []).most_common(5))}
    return out


def _split_order(answers: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A split's answers as they were posted: its labelled half, then its held-out half."""
    return [a for a in answers if a.get("part") == "train"] + [a for a in answers if a.get("part") == "test"]


def _summed(figs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """:func:`alarm_figures` of several servers (the splits), added up per set."""
    out: dict[str, Any] = {}
    for f in figs:
        for s, v in f.items():
            o = out.setdefault(s, {"successful": 0, "false_alarms": 0, "failed": 0, "caught": 0, "unknown": 0,
                                   "causes": {}})
            for k in ("successful", "false_alarms", "failed", "caught", "unknown"):
                o[k] += v[k]
            for c, n in v["causes"].items():
                o["causes"][c] = o["causes"].get(c, 0) + n
    return dict(sorted(out.items()))


# ---- after retrain: served vs the cheap learners --------------------------------------------------------


def served_figures(work: Path, runs_by_key: dict[str, Run], splits: int, seed: int = 0) -> dict[str, Any]:
    """Per set over the splits: the served AUROC on the held-out half, both cheap learners fitted on the
    same labelled half, the better one per set, and the paired 95 % interval (tasks resampled)."""
    from model.training.agentmodel.cv import CheapLearners, cheap_view

    views: dict[str, tuple[str, int, int]] = {}

    def view(key: str) -> tuple[str, int, int]:
        if key not in views:
            r = runs_by_key[key]
            views[key] = cheap_view(local_trace(stripped(r), r.format))
        return views[key]

    units: dict[str, list[AurocUnit]] = defaultdict(list)
    basis: dict[str, Counter[str]] = defaultdict(Counter)
    for k in range(splits):
        ans = load(work, f"split{k}")
        train = [a for a in ans if a["part"] == "train" and a.get("status") == 200 and a["key"] in runs_by_key]
        test = [a for a in ans if a["part"] == "test" and a.get("status") == 200 and a.get("p") is not None]
        for s in sorted({a["set"] for a in test}):
            tr = [a for a in train if a["set"] == s]
            te = [a for a in test if a["set"] == s]
            ytr = np.array([a["failed"] for a in tr], float)
            yte = np.array([a["failed"] for a in te], float)
            if len(tr) < 4 or ytr.min() == ytr.max() or yte.min() == yte.max():
                continue
            vtr, vte = [view(a["key"]) for a in tr], [view(a["key"]) for a in te]

            def lens(v: list[tuple[str, int, int]]) -> np.ndarray:
                return np.array([[math.log1p(x[1]), math.log1p(x[2])] for x in v])

            cheap = CheapLearners([x[0] for x in vtr], lens(vtr), ytr).score([x[0] for x in vte], lens(vte))
            scores = {"served": np.array([a["p"] for a in te], float), **cheap}
            units[s].append(AurocUnit.make(yte, scores, [a["task"] for a in te]))
            basis[s].update(str(a.get("basis_model")) for a in te)
    out: dict[str, Any] = {}
    for s, us in sorted(units.items()):
        pts = {m: float(np.mean([u.point()[m] for u in us])) for m in ("served", *CHEAP)}
        best = max(CHEAP, key=lambda m: pts[m])
        reps = [u.replicates(w) for u, w in zip(us, group_bootstrap_weights(us, seed, 1000), strict=True)]
        with np.errstate(all="ignore"):
            rep = {m: np.nanmean(np.array([r[m] for r in reps]), axis=0) for m in ("served", best)}
        out[s] = {"splits": len(us), **pts, "best": best, "diff": pts["served"] - pts[best],
                  "interval": list(percentile_interval(rep["served"] - rep[best])), "basis": dict(basis[s])}
    return out


# ---- hard cases --------------------------------------------------------------------------------------


def hard_figures(answers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    ok = [a for a in answers if a.get("status") == 200]
    out: dict[str, Any] = {}
    a_ = [a for a in ok if a["truth"] == "same_tools_a"]
    b_ = [a for a in ok if a["truth"] == "same_tools_b"]
    if a_ and b_:
        fig = agent_figures(a_ + b_)
        ma, mb = fig["configs"]["same_tools_a"]["largest_agent"], fig["configs"]["same_tools_b"]["largest_agent"]
        out["same_tools"] = {**fig, "told_apart": ma != mb and fig["pass"]}
    ch = [a for a in ok if a["truth"] == "prompt_change"]
    if ch:
        half = len(ch) // 2
        before, after = ch[:half], ch[half:]
        top = Counter(inferred(a) for a in before).most_common(1)[0][0]
        new = Counter(inferred(a) for a in after if inferred(a) != top)
        out["prompt_change"] = {"before": len(before), "after": len(after), "agent_before": top,
                                "after_same": sum(inferred(a) == top for a in after), "after_other": dict(new),
                                "sources_after": dict(Counter(str(a.get("agent_source")) for a in after))}
    return out


# ---- the report ---------------------------------------------------------------------------------------


def _f(x: Any, nd: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def _iv(iv: Sequence[float]) -> str:
    return f"[{_f(iv[0])}, {_f(iv[1])}]"


def _agents_md(title: str, fig: dict[str, Any]) -> list[str]:
    if not fig.get("runs"):
        return [f"### {title}", "", "(no answers)", ""]
    src = fig["sources"]
    lines = [f"### {title}", "",
             f"{fig['runs']} runs; {fig['agent_field']} answers carried `agent` (agent_source: "
             + ", ".join(f"{k} {v}" for k, v in sorted(src.items())) + "; without `agent` the basis's agent is read). "
             f"Inferred agents: {len(fig['agents'])}, the smallest {fig['smallest']} runs; adjusted Rand "
             f"**{fig['ari']:.3f}**. Done-when (share ≥ {SHARE_MIN:.0%}, purity ≥ {PURITY_MIN:.0%}, no agent under "
             f"{SMALLEST_MIN} runs): **{'holds' if fig['pass'] else 'fails'}**.", "",
             "| configuration | runs | inferred agents | largest | share |", "| --- | ---: | ---: | --- | ---: |"]
    for c, v in fig["configs"].items():
        lines.append(f"| {c} | {v['runs']} | {v['agents']} | `{v['largest_agent']}` | {v['share']:.3f} |")
    lines += ["", "| inferred agent | runs | majority configuration | purity |", "| --- | ---: | --- | ---: |"]
    for a, v in sorted(fig["agents"].items(), key=lambda kv: -kv[1]["runs"])[:30]:
        lines.append(f"| `{a}` | {v['runs']} | {v['majority']} | {v['purity']:.3f} |")
    if len(fig["agents"]) > 30:
        lines.append(f"| … {len(fig['agents']) - 30} more | | | |")
    return [*lines, ""]


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent)
    return out.stdout.strip() or "?"


def write_report(work: Path, sets: Path, out: Path, *, limit: int | None, splits: int,
                 only_sets: Sequence[str] | None, command: str, timings: dict[str, float], total_s: float) -> None:
    """``out`` (markdown) from the answers under ``work``; ``report.json`` beside the answers."""
    runs = read_sets(sets, limit=limit, sets=only_sets)
    by_key = {r.key: r for r in runs}
    week, blk, hard = load(work, "week"), load(work, "blocks"), load(work, "hard")
    wj = [a for a in week if a["part"] == "json"]
    ws = [a for a in week if a["part"] == "spans"]
    figs: dict[str, Any] = {
        "agents_week": agent_figures(wj), "agents_blocks": agent_figures(blk), "agents_spans": agent_figures(ws),
        "same_agent": same_agent(wj, ws), "tasks": task_figures(wj), "zero_shot": zero_shot_figures(wj),
        "alarms_week": alarm_figures(wj), "alarms_blocks": alarm_figures(blk), "hard": hard_figures(hard),
        "retrain": [json.loads(p.read_text()) for k in range(splits)
                    if (p := work / f"split{k}" / "retrain.json").exists()],
        "served": served_figures(work, by_key, splits), "timings": timings,
        "alarms_retrained": _summed([alarm_figures(_split_order(load(work, f"split{k}")), part="test")
                                     for k in range(splits)]),
    }
    (work / "report.json").write_text(json.dumps(figs, indent=1, default=str))
    schema = Counter(str(a.get("schema")) for a in wj)
    n_sets = Counter(r.set for r in runs)
    L = ["# The first week with nothing named (issue 31, item 7)", "",
         f"`{command}` — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit `{_commit()}`, "
         f"{len(runs)} runs ({', '.join(f'{s} {n}' for s, n in sorted(n_sets.items()))}"
         + (f"; the first {limit} tasks of each configuration" if limit else "") + f"), {splits} splits, "
         f"response schema {dict(schema)}. Wall time {total_s / 60:.1f} min this invocation; per phase "
         "(summed over resumed invocations): " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in timings.items()) + ".",
         "",
         "Every run stripped of its id, task type, labels, task id and its format's label fields (checked: the "
         "bench stops on a leak), posted to a real `triage serve` with every default, one API key, no agent "
         "name, no options (`bench/first_week.py`'s docstring has the phases). Inputs: "
         "`python -m model.data.export_first_week DIR`.", "", "## Agents", ""]
    L += _agents_md("Interleaved week (JSON)", figs["agents_week"])
    L += _agents_md("Blocks of 100 runs of one agent (JSON, fresh server)", figs["agents_blocks"])
    L += _agents_md("GenAI spans, content capture off (the week's server, after the JSON)", figs["agents_spans"])
    sa = figs["same_agent"]
    L += [f"Same agent through JSON and through spans: **{sa['same']} of {sa['runs']}** runs.", ""]
    hf = figs["hard"]
    L += ["### Hard cases (fresh server)", ""]
    if "same_tools" in hf:
        st = hf["same_tools"]
        L += [f"Two agents, same tools and model, different prompts (τ-airline runs, half the tasks with another "
              f"system prompt): shares {st['configs']['same_tools_a']['share']:.3f} / "
              f"{st['configs']['same_tools_b']['share']:.3f} in agents `{st['configs']['same_tools_a']['largest_agent']}` / "
              f"`{st['configs']['same_tools_b']['largest_agent']}`, adjusted Rand {st['ari']:.3f}: told apart: "
              f"**{'yes' if st['told_apart'] else 'no'}**.", ""]
    if "prompt_change" in hf:
        pc = hf["prompt_change"]
        L += [f"Prompt changed mid-week (AgentProcessBench, the second half with a new system message): "
              f"{pc['after_same']} of {pc['after']} later runs stayed in `{pc['agent_before']}`; elsewhere: "
              f"{pc['after_other'] or 'none'} (agent_source of the later runs: {pc['sources_after']}).", ""]
    L += ["## Task groups", ""]
    if figs["tasks"] is None:
        L += ["The answers carry no task group (no `task_group` / `task` field): not measured. An API that "
              "exposes a run's recovered task (in the answer, or `GET /v1/traces/{id}`) is needed.", ""]
    else:
        L += ["| set | runs | true tasks | groups | same-task pair recall | B-cubed F1 | done when (recall ≥ 0.9, "
              "groups ≥ tasks / 2) |", "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for s, v in figs["tasks"].items():
            ok = v["pair_recall"] >= 0.9 and v["groups"] >= v["tasks"] / 2
            judged = s in ("tau_airline", "agentprocessbench", "tau2")
            L.append(f"| {s} | {v['runs']} | {v['tasks']} | {v['groups']} | {_f(v['pair_recall'])} | {_f(v['bcubed_f1'])} | "
                     f"{('holds' if ok else 'fails') if judged else '(reported only)'} |")
        L.append("")
    L += ["## Retrain", ""]
    for k, r in enumerate(figs["retrain"]):
        L.append(f"- split {k}: exit **{r['rc']}**, traceback: **{'yes' if r['traceback'] else 'no'}**, "
                 f"{r['seconds']:.0f} s, refusal codes {r.get('refusals') or 'none printed'}" + (f"; last stderr line: `{r['last_error_line'][:200]}`" if r["rc"] not in (0, 1)
                                            or r["traceback"] else ""))
    L += ["", "## After retrain: served vs the better cheap learner (held-out half, over the splits)", "",
          "| set | splits | served | TF-IDF | length | better | served − better [95 %] | served basis |",
          "| --- | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    sv = figs["served"]
    for s, v in sv.items():
        L.append(f"| {s} | {v['splits']} | {_f(v['served'])} | {_f(v['tfidf'])} | {_f(v['length'])} | {v['best']} | "
                 f"{_f(v['diff'])} {_iv(v['interval'])} | {v['basis']} |")
    if sv:
        ms = float(np.mean([v["served"] for v in sv.values()]))
        mb = float(np.mean([v[v["best"]] for v in sv.values()]))
        below = [s for s, v in sv.items() if v["interval"][1] < -0.03]
        L += ["", f"Mean served {ms:.3f} vs mean better cheap {mb:.3f} (done when ≥ {mb - 0.01:.3f}): "
              f"**{'holds' if ms >= mb - 0.01 else 'fails'}**; sets whose interval lies entirely below −0.03: "
              f"{below or 'none'}."]
    L += ["", "## Zero-shot (the week, before any label)", "",
          "| set | runs | failed | AUROC [95 %, tasks] | tied at one score | ECE | ECE of the base rate |",
          "| --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    zs = figs["zero_shot"]
    for s, v in zs.items():
        L.append(f"| {s} | {v['runs']} | {v['failed']} | {_f(v['auroc'])} {_iv(v['interval'])} | {v['tied']:.2f} | "
                 f"{_f(v['ece'])} | {_f(v['ece_base'])} ({v['base']:.2f}) |")
    if zs:
        ok = (all(v["interval"][1] >= 0.5 for v in zs.values()) and sum(v["auroc"] >= 0.5 for v in zs.values())
              >= len(zs) - 1 and float(np.mean([v["auroc"] for v in zs.values()])) >= 0.58
              and all(v["tied"] <= 0.5 for v in zs.values()) and all(v["ece"] <= v["ece_base"] for v in zs.values()))
        L += ["", f"Done when (upper bound ≥ 0.5 on all, point ≥ 0.5 on all but one, mean ≥ 0.58, no set over half "
              f"tied, ECE ≤ the base rate's on every set): **{'holds' if ok else 'fails'}**.",
              f"Mean AUROC {np.mean([v['auroc'] for v in zs.values()]):.3f}; point ≥ 0.5 on "
              f"{sum(v['auroc'] >= 0.5 for v in zs.values())} of {len(zs)}; upper bound ≥ 0.5 on "
              f"{sum(v['interval'][1] >= 0.5 for v in zs.values())}; more than half tied on "
              f"{[s for s, v in zs.items() if v['tied'] > 0.5] or 'none'}. These are the shipped zero-shot's "
              "answers: on the developer sets it was fitted with them (in-sample), so they are an upper bound "
              "of what a new agent gets; the leave-one-source-out figures are `reports/real.md`'s. On agents "
              "it has never seen, feed their labelled runs to this bench the same way."]
    warm = f"after each inferred agent's first {WARMUP} runs" if WARMUP else "every run"
    for title, key in (("the interleaved week", "alarms_week"), ("blocks of 100", "alarms_blocks"),
                       ("after retrain: the held-out half of every split", "alarms_retrained")):
        L += ["", f"## False alarms, {title} ({warm})", "",
              "| set | successful | false alarms | share | ≤ 5 % or ≤ 1 | failed | caught (recall) | healthy null | "
              "causes of the false alarms |", "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |"]
        for s, v in figs[key].items():
            share = v["false_alarms"] / v["successful"] if v["successful"] else float("nan")
            rec = v["caught"] / v["failed"] if v["failed"] else float("nan")
            ok = v["false_alarms"] <= 1 or share <= 0.05
            L.append(f"| {s} | {v['successful']} | {v['false_alarms']} | {_f(share)} | {'yes' if ok else 'no'} | "
                     f"{v['failed']} | {v['caught']} ({_f(rec)}) | {v['unknown']} | {v['causes'] or ''} |")
    L += ["", "Figures: `report.json` beside the answers (`--work`).", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(L), encoding="utf-8")


__all__ = ["agent_figures", "alarm_figures", "hard_figures", "load", "same_agent", "served_figures",
           "task_figures", "write_report", "zero_shot_figures"]
