"""How well :mod:`model.core.identity` tells real agents apart with nothing named (issue 31, item 1).

The truth is nine configurations of the vendored real sets: τ-airline; τ² airline; τ² telecom;
τ² telecom-solo (the ``no-user`` files); AgentProcessBench; SWE; WebShop; Reflexion; Who&When.
Each run is stripped as a user would send it (trace id, ``task_type``, labels, metadata) and posted
to one tenant, online, in two orders: shuffled within each configuration (seed 0) and interleaved
across them (a uniformly random merge, seed 0); and in blocks of 100 runs of one configuration
(blocks in a shuffled order, seed 0). Each order is read as chat JSON and as OTLP GenAI spans with
content capture off and on (:mod:`model.data.genai_spans`, read back through
:func:`model.importers.load_traces`, the reader of ``POST /v1/diagnose``; ``/otlp/v1/traces``
feeds sessions through :mod:`model.importers.live`, which reads the same span attributes).

Per configuration: coverage (the share of its runs in its largest inferred agent); per inferred
agent: purity (the share of its largest configuration) and size; the adjusted Rand index. The
targets: coverage ≥ 0.90, purity ≥ 0.95, no agent under 5 runs. Then whether a run gets the same
agent through chat JSON and through spans (each span signature assigned to the agents the chat
runs formed), the hard cases (two agents with the same tools and model and different prompts; a
prompt edited mid-week) and the cost of ``signature`` + ``assign`` against 20 profiles.

``python -m model.training.identity_eval`` prints it all (markdown; ``reports/identity.md``).
"""

from __future__ import annotations

import random
import re
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sklearn.metrics import adjusted_rand_score

from model.core.consolidation import infer_agents
from model.core.identity import (
    THRESHOLD,
    AgentProfile,
    RunSignature,
    assign,
    signature,
)
from model.core.schema import StepKind, Trace
from model.data.export_first_week import span_fields, tau2_configuration
from model.data.genai_spans import otlp_content_off, otlp_content_on
from model.data.realdata import RealRun, load_source
from model.data.stranger import stranger
from model.importers import load_traces

CONFIGS = ("tau_airline", "tau2_airline", "tau2_telecom", "tau2_telecom_solo", "agentprocessbench", "swe",
           "webshop", "reflexion", "whowhen")
TARGET_COVERAGE, TARGET_PURITY, TARGET_MIN_SIZE = 0.90, 0.95, 5


@dataclass(frozen=True)
class Run:
    """One stripped run with its truth (used only for scoring) and what a GenAI exporter would say of its
    LLM calls (``spans``: :func:`model.data.export_first_week.span_fields`)."""

    config: str
    spans: dict[str, str | None]
    trace: Trace


def config_of(r: RealRun) -> tuple[str, dict[str, str | None]]:
    """The run's configuration and its ``spans`` fields (truth labels: from the set's provenance, never an
    input)."""
    prov = r.trace.labels.provenance if r.trace.labels is not None else {}
    if r.source == "tau2":
        return tau2_configuration(str(prov["domain"]), str(prov["mode"])), span_fields("tau2", str(prov["model"]))
    return {"reflexion_hotpotqa": "reflexion"}.get(r.source, r.source), span_fields(r.source)


def load_runs() -> list[Run]:
    out: list[Run] = []
    for source in ("tau_airline", "tau2", "agentprocessbench", "swe", "webshop", "reflexion_hotpotqa", "whowhen"):
        for r in load_source(source):
            config, spans = config_of(r)
            out.append(Run(config, spans, stranger(r.trace, f"run-{len(out):05d}")))
    return out


def span_trace(run: Run, *, content: bool = False) -> Trace:
    """The run as GenAI spans (content capture off, or on), read back as ``/v1/diagnose`` reads them
    (format auto)."""
    export = otlp_content_on if content else otlp_content_off
    sp = run.spans
    (trace,) = load_traces(export(run.trace, model=sp["model"], provider=sp["provider"],
                                  operation=str(sp["operation"])))
    return trace


def interleaved(runs: Sequence[Run], seed: int = 0) -> list[int]:
    """Indices: shuffled within each configuration, then a uniformly random merge of them."""
    rng = random.Random(seed)
    by: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(runs):
        by[r.config].append(i)
    for v in by.values():
        rng.shuffle(v)
    slots = [c for c, v in by.items() for _ in v]
    rng.shuffle(slots)
    pos: Counter[str] = Counter()
    out = []
    for c in slots:
        out.append(by[c][pos[c]])
        pos[c] += 1
    return out


def blocks(runs: Sequence[Run], size: int = 100, seed: int = 0) -> list[int]:
    """Indices: blocks of ``size`` runs of one configuration (shuffled within), blocks shuffled."""
    rng = random.Random(seed)
    by: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(runs):
        by[r.config].append(i)
    chunks = []
    for v in by.values():
        rng.shuffle(v)
        chunks += [v[k:k + size] for k in range(0, len(v), size)]
    rng.shuffle(chunks)
    return [i for ch in chunks for i in ch]


@dataclass(frozen=True)
class Scores:
    coverage: dict[str, float]
    purity: dict[str, float]  # per inferred agent
    sizes: dict[str, int]
    majority: dict[str, str]  # inferred agent → its largest configuration
    ari: float

    @property
    def ok(self) -> bool:
        return (min(self.coverage.values()) >= TARGET_COVERAGE and min(self.purity.values()) >= TARGET_PURITY
                and min(self.sizes.values()) >= TARGET_MIN_SIZE)


def score(truth: Sequence[str], pred: Sequence[str]) -> Scores:
    pairs = Counter(zip(truth, pred, strict=True))
    per_t: Counter[str] = Counter(truth)
    per_p: Counter[str] = Counter(pred)
    coverage = {t: max(n for (tt, _), n in pairs.items() if tt == t) / per_t[t] for t in per_t}
    purity, majority = {}, {}
    for p in per_p:
        best = max(((n, t) for (t, pp), n in pairs.items() if pp == p))
        purity[p], majority[p] = best[0] / per_p[p], best[1]
    return Scores(coverage, purity, dict(per_p), majority, float(adjusted_rand_score(truth, pred)))


def _fmt_scores(title: str, s: Scores, configs: Sequence[str]) -> list[str]:
    lines = [f"#### {title}", "",
             f"{len(s.sizes)} inferred agents; ARI {s.ari:.3f}; smallest agent {min(s.sizes.values())} runs; "
             f"lowest purity {min(s.purity.values()):.3f}; targets met: {'yes' if s.ok else 'NO'}", "",
             "| configuration | coverage | its largest agent: size, purity |", "| --- | ---: | --- |"]
    for c in configs:
        agents = [a for a in s.sizes if s.majority[a] == c]
        big = max(agents, key=lambda a: s.sizes[a], default=None)
        desc = f"{s.sizes[big]}, {s.purity[big]:.3f}" if big is not None else "—"
        lines.append(f"| {c} | {s.coverage[c]:.3f} | {desc} (agents led by it: {len(agents)}) |")
    impure = [(a, s.sizes[a], s.purity[a], s.majority[a]) for a in s.sizes
              if s.purity[a] < TARGET_PURITY or s.sizes[a] < TARGET_MIN_SIZE]
    if impure:
        lines += ["", "Agents under a target: " + "; ".join(
            f"{a} ({n} runs, {p:.2f} {m})" for a, n, p, m in sorted(impure, key=lambda x: -x[1])[:12])]
    return [*lines, ""]


# ---- hard cases ----------------------------------------------------------------------------------


def _with_system(trace: Trace, text: str, n: int) -> Trace:
    steps = [s.model_copy() for s in trace.steps]
    for i, s in enumerate(steps):
        if s.kind is StepKind.SYSTEM:
            steps[i] = s.model_copy(update={"content": text})
    return trace.model_copy(update={"id": f"hard-{n:05d}", "steps": steps})


def edited_policy(policy: str) -> str:
    """A mid-week edit of a policy: its second ``## `` section dropped, a new section added."""
    parts = re.split(r"(?m)^(?=## )", policy)
    kept = parts[:2] + parts[3:] if len(parts) > 3 else parts
    return "".join(kept) + ("\n## Loyalty upgrades\n\nGold members may be offered a free seat upgrade once per "
                            "reservation when a flight is delayed by more than two hours. Always confirm with the "
                            "user before applying it and record it in the reservation notes.\n")


def hard_cases(runs: Sequence[Run]) -> list[str]:
    tau = [r for r in runs if r.config == "tau_airline"]
    tau2_policy = next(s.content for r in runs if r.config == "tau2_airline" for s in r.trace.steps
                       if s.kind is StepKind.SYSTEM)
    policy = next(s.content for s in tau[0].trace.steps if s.kind is StepKind.SYSTEM)
    rng = random.Random(0)
    out = ["### Hard cases", ""]
    # 1. two agents, the same tools and model, different prompts: τ-airline's runs, half of them under
    #    τ²'s airline policy (a real, different prompt for the same tools), interleaved
    order = list(range(len(tau)))
    rng.shuffle(order)
    half = set(order[: len(order) // 2])
    traces = [_with_system(r.trace, tau2_policy, i) if i in half else r.trace for i, r in enumerate(tau)]
    truth = ["B" if i in half else "A" for i in range(len(tau))]
    pred = infer_agents([signature(traces[i]) for i in order])
    s = score([truth[i] for i in order], pred)
    out += [f"1. Same tools, same runs, two prompts (τ-airline's runs, half under τ² airline's policy; "
            f"{len(tau)} runs interleaved): {len(s.sizes)} agents, coverage A {s.coverage['A']:.3f} / "
            f"B {s.coverage['B']:.3f}, lowest purity {min(s.purity.values()):.3f}, ARI {s.ari:.3f} — told apart: "
            f"{'yes' if s.ok else 'NO'}. With content capture off the two are the same tools and model: "
            "nothing tells them apart (not measured as a miss: the information is not there)."]
    # 2. one agent whose prompt changes mid-week: the first 100 runs under the policy, the rest (a) under
    #    an edited one (a section dropped, one added), (b) under a rewritten one (τ² airline's)
    for label, new_policy in (("edited (a section dropped, one added)", edited_policy(policy)),
                              ("rewritten (τ² airline's policy)", tau2_policy)):
        seq = [r.trace if k < 100 else _with_system(r.trace, new_policy, k)
               for k, r in enumerate(tau[i] for i in order)]
        profiles: dict[str, AgentProfile] = {}
        keys = infer_agents([signature(t) for t in seq], profiles)
        first = keys[0]
        after = Counter(keys[100:])
        desc = profiles[first].describe()
        others = [profiles[k].describe()["origin"] for k in profiles if k != first]
        out.append(f"2{'ab'[label.startswith('rewritten')]}. Prompt {label} after run 100 of τ-airline's 200 (same "
                   f"runs otherwise): {len(profiles)} agent(s); {after[first]} of {len(seq) - 100} later runs stay "
                   f"with the first agent; its recorded instruction changes: {desc['instruction_changes'] or '—'}; "
                   f"new agents' recorded origin: {others[0] if others else '—'}.")
    return [*out, ""]


# ---- cost ----------------------------------------------------------------------------------------


def cost(runs: Sequence[Run]) -> str:
    """Time of ``signature`` + ``assign`` against 20 profiles, for real runs of 20–40 steps."""
    order = interleaved(runs)
    profiles: dict[str, AgentProfile] = {}
    by: dict[str, list[RunSignature]] = defaultdict(list)
    for i in order:
        by[runs[i].config].append(signature(runs[i].trace))
    for c, sigs in by.items():  # 20 profiles: each configuration's runs, cut in two (three for the largest)
        parts = 3 if len(sigs) >= 500 else 2
        for k in range(parts):
            profiles[f"{c}/{k}"] = AgentProfile.from_signatures(sigs[k::parts][:60])
    profiles = dict(list(profiles.items())[:20])
    probe = [runs[i].trace for i in order if 20 <= len(runs[i].trace.steps) <= 40][:200]
    first, best = [], []
    for t in probe:
        laps = []
        for _ in range(3):
            start = time.perf_counter()
            assign(signature(t), profiles)
            laps.append(time.perf_counter() - start)
        first.append(laps[0])
        best.append(min(laps))

    def ms(xs: list[float], q: float) -> str:
        return f"{sorted(xs)[int(q * (len(xs) - 1))] * 1e3:.3f} ms"
    return (f"`signature` + `assign` against {len(profiles)} profiles, {len(probe)} real runs of 20–40 steps: "
            f"first pass median {ms(first, 0.5)}, 90th percentile {ms(first, 0.9)}; best of three passes "
            f"median {ms(best, 0.5)}, 90th percentile {ms(best, 0.9)} (system-prompt features cached by their "
            "text, as in a running service; the first pass's tail is this shared 2-core host: its slow laps are ~12 ms "
            "preemptions that the same run's next passes do not show).")


def order_robustness(runs: Sequence[Run], views: dict[str, list[RunSignature]], *, n_interleaved: int = 30,
                     n_blocks: int = 10, truths: dict[str, list[str]] | None = None) -> str:
    """How often the targets hold over many arrival orders (interleaved seeds 0…, block orders 0…): the
    first runs an agent's profile sees decide what later runs join, so one order proves little.
    ``truths``: per view, a truth other than the runs' configurations."""
    orders = [interleaved(runs, s) for s in range(n_interleaved)] + [blocks(runs, 100, s) for s in range(n_blocks)]
    lines = [f"#### Over {len(orders)} arrival orders ({n_interleaved} interleaved, {n_blocks} in blocks of 100)\n",
             "| view | orders meeting the targets | ARI median / worst | smallest coverage, median / worst | "
             "what the failing orders show |", "| --- | ---: | --- | --- | --- |"]
    for view, sigs in views.items():
        truth = (truths or {}).get(view) or [r.config for r in runs]
        got = [score([truth[i] for i in o], infer_agents([sigs[i] for i in o])) for o in orders]
        ari = sorted(g.ari for g in got)
        cov = sorted(min(g.coverage.values()) for g in got)
        why: Counter[str] = Counter()
        for g in got:
            if g.ok:
                continue
            for p, v in g.purity.items():
                if v < TARGET_PURITY:
                    why[f"{g.majority[p]} absorbs another configuration"] += 1
            if min(g.sizes.values()) < TARGET_MIN_SIZE:
                why["a stray agent under 5 runs"] += 1
            if min(g.coverage.values()) < TARGET_COVERAGE:
                why["a configuration split"] += 1
        lines.append(f"| {view} | {sum(g.ok for g in got)} of {len(got)} | {ari[len(ari) // 2]:.3f} / {ari[0]:.3f} | "
                     f"{cov[len(cov) // 2]:.3f} / {cov[0]:.3f} | "
                     + "; ".join(f"{k} ({n})" for k, n in why.most_common(4)) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    runs = load_runs()
    truth = [r.config for r in runs]
    chat = [signature(r.trace) for r in runs]
    spans = [signature(span_trace(r)) for r in runs]
    spans_on = [signature(span_trace(r, content=True)) for r in runs]
    print("## Agents inferred with nothing named (`python -m model.training.identity_eval`)\n")
    print(f"{len(runs)} real runs, {len(CONFIGS)} configurations: "
          + ", ".join(f"{c} {truth.count(c)}" for c in CONFIGS) + ".\n")
    chat_agents: dict[str, list[str]] = {}
    for view, sigs in (("chat JSON", chat), ("GenAI spans, content capture off", spans),
                       ("GenAI spans, content capture on", spans_on)):
        for name, order in (("interleaved (seed 0)", interleaved(runs)), ("blocks of 100", blocks(runs))):
            pred = infer_agents([sigs[i] for i in order])
            if view == "chat JSON":
                chat_agents[name] = pred
            print("\n".join(_fmt_scores(f"{view}, {name}", score([truth[i] for i in order], pred), CONFIGS)))
    # content off, τ² telecom's two modes share their models and the solo mode's tools include the other's:
    # scored again with the two as one configuration, what such spans can tell apart
    merged = ["tau2_telecom_any" if t.startswith("tau2_telecom") else t for t in truth]
    cfgs = [c for c in CONFIGS if not c.startswith("tau2_telecom")] + ["tau2_telecom_any"]
    for name, order in (("interleaved (seed 0)", interleaved(runs)), ("blocks of 100", blocks(runs))):
        pred = infer_agents([spans[i] for i in order])
        print("\n".join(_fmt_scores(f"GenAI spans, content capture off, {name}, τ² telecom's two modes as one "
                                    "configuration", score([merged[i] for i in order], pred), cfgs)))
    print("#### Sensitivity to the threshold (interleaved; the default is "
          f"{THRESHOLD})\n\n| threshold | chat: agents, ARI, targets | spans (content off): agents, ARI, targets |\n"
          "| ---: | --- | --- |")
    order = interleaved(runs)
    for th in (0.5, 0.55, 0.6, 0.65, 0.7):
        cells = []
        for sigs in (chat, spans):
            s = score([truth[i] for i in order], infer_agents([sigs[i] for i in order], threshold=th))
            cells.append(f"{len(s.sizes)}, {s.ari:.3f}, {'met' if s.ok else 'not met'}")
        print(f"| {th} | {cells[0]} | {cells[1]} |")
    for seed in (1, 2):
        order = interleaved(runs, seed)
        cells = []
        for sigs in (chat, spans):
            s = score([truth[i] for i in order], infer_agents([sigs[i] for i in order]))
            cells.append(f"{len(s.sizes)}, {s.ari:.3f}, {'met' if s.ok else 'not met'}")
        print(f"| {THRESHOLD}, interleaved with seed {seed} | {cells[0]} | {cells[1]} |")
    print()
    both = "GenAI spans, content capture off, τ² telecom's two modes as one configuration"
    print(order_robustness(runs, {"chat JSON": chat, "GenAI spans, content capture off": spans,
                                  "GenAI spans, content capture on": spans_on, both: spans}, truths={both: merged}))
    # the same run through spans: each span signature against the agents the chat runs formed
    order = interleaved(runs)
    by_agent: dict[str, list[RunSignature]] = defaultdict(list)
    for i, a in zip(order, chat_agents["interleaved (seed 0)"], strict=True):
        by_agent[a].append(chat[i])
    profiles = {a: AgentProfile.from_signatures(v) for a, v in by_agent.items()}
    chat_of = dict(zip(order, chat_agents["interleaved (seed 0)"], strict=True))
    same: Counter[str] = Counter()
    same_on: Counter[str] = Counter()
    for i in order:
        same[truth[i]] += assign(spans[i], profiles)[0] == chat_of[i]
        same_on[truth[i]] += assign(spans_on[i], profiles)[0] == chat_of[i]
    print("#### The same run through chat JSON and through spans\n")
    print("Each run's span signature assigned against the agents the chat JSON runs formed (interleaved, "
          "seed 0). The sets' chat logs carry no model, so with content off only the tool names are shared, "
          "and tools alone never make a match (`identity.IDENTITY_CHANNELS`: every agent of one environment "
          "shares its tools): such runs start agents of their own, which a tenant merges by hand:\n")
    print("| configuration | spans, content on | spans, content off |\n| --- | ---: | ---: |")
    for c in CONFIGS:
        print(f"| {c} | {same_on[c] / truth.count(c):.3f} | {same[c] / truth.count(c):.3f} |")
    print()
    print("\n".join(hard_cases(runs)))
    print("### Cost\n\n" + cost(runs) + "\n")


if __name__ == "__main__":
    main()


__all__ = ["CONFIGS", "Run", "Scores", "blocks", "config_of", "edited_policy", "hard_cases", "interleaved",
           "load_runs", "order_robustness", "score", "span_trace"]

