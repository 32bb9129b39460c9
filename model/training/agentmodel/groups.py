"""Task groups recovered from one agent's runs when they carry no task id.

Grouped cross-validation needs the runs of one task on one side of a fold; real tenants rarely send
task ids. An agent's runs usually share a long template (instructions, a tool list, a worked
example, the policy as a system message) with the task somewhere inside it, and trials of one task
rarely repeat each other word for word (a simulated user paraphrases). So a run's task is read from
what *differs* across the agent's runs, on three kinds of evidence:

1. **the opening's words** — system messages, the first ``user_messages`` user messages (or the
   first message, when a run opens with none): word features, minus the template — words in more
   than ``text_max_df`` of the agent's distinct openings (but never those in ``min_df_cap`` runs or
   fewer, and always those in a majority), long or short, wherever it sits;
2. **the task's identifying arguments** — identifiers in the user's messages (tokens with digits or
   underscores: ``mia_li_3668``, ``PEP4E0``, ``555-123-2002``), the ``key=value`` leaves of the
   early tool calls' arguments and JSON results, and each (call, answer) pair — minus those in more
   than ``entity_max_df`` of the runs;
3. **the environment's answers** — a task is one starting state, so the first ``constraint_calls``
   calls of two runs of one task get the same answer to the same call. Two runs that got different
   answers to the same early call are never grouped (a cannot-link; failed calls say nothing and
   are left out), and runs that got the same
   answer to a *routine* call (one made by at least ``routine_share`` of the runs, answered
   differently across runs: a state read-out) are joined, most specific answer first.

Runs are clustered by average linkage on the better of the two cosines (IDF-weighted, binary
features) at ``threshold``, never across a cannot-link; the state read-outs then join clusters.
No merge makes a group of more than ``group_max_share`` of the runs (``min_df_cap`` runs at least;
exact repeats are one node and may exceed it): evidence shared across tasks chains them into a few
lumps, and grouped folds over two or three lumps measure a shift between kinds of task rather than
new tasks (τ² telecom: every learner, zero-shot included, read below 0.5 on 2-3 lumps).
Exact repeats (the same differing part) are one node from the start, so a task repeated more often
than the template cut-off still forms one group.

Cost: features are read once a run; candidate pairs come from an inverted index over features kept
(at most ``max_postings`` runs a feature), so the work grows with the runs times that bound, not
with the square of the runs. ``python -m model.training.agentmodel.groups_eval`` prints the time on
every set (``reports/task_groups.md``).

>>> from model.core.schema import Step, StepKind, Trace
>>> def run(text): return Trace(steps=[Step(kind=StepKind.USER_INPUT, content=text)])
>>> group_runs([run("Refund order 7731 please"), run("please refund order 7731"),
...             run("Cancel booking QX12")], [None, None, None])
['req:0', 'req:0', 'req:2']
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from model.core.errors import InputError
from model.core.schema import StepKind, StepStatus, Trace


@dataclass(frozen=True)
class GroupingConfig:
    """How :func:`group_runs` recovers tasks (defaults chosen on τ-airline, AgentProcessBench, SWE
    and WebShop; ``reports/task_groups.md``). Shares are of the runs grouped together (one agent's)."""

    user_messages: int = 2        # user messages of the opening read
    entity_steps: int = 60        # steps (system messages aside) read for identifiers and answers
    text_max_df: float = 0.10     # an opening word in more of the openings is template
    entity_max_df: float = 0.25   # an identifier or answer in more of the runs says nothing of the task
    min_df_cap: int = 8           # ... but one in this many runs or fewer always counts (small agents)
    max_postings: int = 64        # the cost bound: a feature in more nodes makes no candidate pairs
    threshold: float = 0.35       # average-linkage cosine
    constraint_calls: int = 2     # the first calls whose answers must agree within a group
    state_calls: int = 10         # the first calls whose answers may join groups (state read-outs)
    routine_share: float = 0.05   # a call made by at least this share of the runs is routine
    state_max_df: float = 0.25    # a read-out answer shared by more of the runs joins nothing
    group_max_share: float = 0.25  # no merge makes a group of more of the runs (exact repeats aside)

    def __post_init__(self) -> None:
        for name in ("text_max_df", "entity_max_df", "threshold", "routine_share", "state_max_df",
                     "group_max_share"):
            v = getattr(self, name)
            if not 0.0 < v <= 1.0:
                raise InputError(f"{name} must be in (0, 1]; got {v!r}", path=name)
        for name in ("user_messages", "entity_steps", "min_df_cap", "max_postings", "constraint_calls",
                     "state_calls"):
            if getattr(self, name) < 0:
                raise InputError(f"{name} must be ≥ 0; got {getattr(self, name)!r}", path=name)


@dataclass
class TaskView:
    """What one run shows of its task: opening words, identifiers, and early (call → answer) pairs."""

    words: frozenset[str]
    entities: frozenset[str]
    constraints: dict[str, str] = field(default_factory=dict)
    readouts: dict[str, str] = field(default_factory=dict)


_WORDS = re.compile(r"\w+")
_IDENT = re.compile(r"[A-Za-z0-9_.\-]*\d[A-Za-z0-9_.\-]*|[A-Za-z]+_[A-Za-z0-9_]+")
_SMALL_NUMBER = re.compile(r"\d{1,3}(\.\d+)?")
_RESULT_KINDS = (StepKind.TOOL_RESULT, StepKind.ERROR)


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=8).hexdigest()


def _identifiers(text: str) -> Iterable[str]:
    for m in _IDENT.findall(text):
        tok = m.strip(".-_").lower()
        if len(tok) >= 3 and not _SMALL_NUMBER.fullmatch(tok):
            yield tok


def _leaves(obj: Any, key: str, out: set[str], depth: int = 0) -> None:
    if depth > 6:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            _leaves(v, str(k), out, depth + 1)
    elif isinstance(obj, list):
        for v in obj[:50]:
            _leaves(v, key, out, depth + 1)
    elif obj is not None:
        s = str(obj).strip().lower()
        if s and len(s) <= 60:
            out.add(f"{key}={s}")


def _call_key(tool: str | None, args: dict[str, Any] | None, content: str) -> str:
    a = json.dumps(args, sort_keys=True, default=str) if args is not None else content
    return f"{tool or ''}\x00{a}"


def task_view(trace: Trace, config: GroupingConfig | None = None) -> TaskView:
    """Read one run's task evidence (nothing here looks at ids, labels, task type or metadata)."""
    cfg = config or GroupingConfig()
    texts: list[str] = []
    users = 0
    opened = False
    for s in trace.steps:
        if s.kind == StepKind.SYSTEM:
            texts.append(s.content)
        elif s.kind == StepKind.USER_INPUT:
            if users < cfg.user_messages:
                texts.append(s.content)
            users += 1
            opened = True
        elif not opened and s.content.strip() and s.kind not in (StepKind.TOOL_CALL, *_RESULT_KINDS):
            texts.append(s.content)  # a run that opens with no user message (a team's first turn)
            opened = True
    words = frozenset(w for t in texts for w in _WORDS.findall(t.lower()))

    ents: set[str] = set()
    pending: dict[str, tuple[str, int]] = {}
    constraints: dict[str, str] = {}
    readouts: dict[str, str] = {}
    calls = 0
    seen = 0
    for s in trace.steps:
        if s.kind == StepKind.SYSTEM:
            continue
        seen += 1
        within = seen <= cfg.entity_steps
        if s.kind == StepKind.USER_INPUT and within:
            ents.update(_identifiers(s.content))
        elif s.kind == StepKind.TOOL_CALL:
            calls += 1
            if s.tool_args and within:
                _leaves(s.tool_args, "arg", ents)
            pending[s.call_id or s.tool_name or ""] = (_call_key(s.tool_name, s.tool_args, s.content), calls)
        elif s.kind in _RESULT_KINDS:
            got = pending.pop(s.call_id or s.tool_name or "", None)
            if got is None:
                continue
            key, order = got
            if s.kind == StepKind.ERROR or s.status == StepStatus.ERROR:
                continue  # an error says little of the task's state, and may be transient
            answer = _digest(s.content)
            if within:
                ents.add(f"call:{_digest(key + chr(0) + answer)}")
                c = s.content.strip()
                if c[:1] in "[{":
                    with contextlib.suppress(ValueError):  # only looks like JSON: its leaves stay out
                        _leaves(json.loads(c), "result", ents)
            if order <= cfg.constraint_calls:
                constraints.setdefault(key, answer)
            if order <= cfg.state_calls:
                readouts.setdefault(key, answer)
    return TaskView(words, frozenset(ents), constraints, readouts)


def _majority(total: int) -> float:
    """More runs than this sharing a feature make it template: half of them, and never just two."""
    return max(0.5 * total, 2.0)


def _cosines(feats: Sequence[frozenset[str]], weights: Sequence[int], max_df: float,
             max_postings: int, kinds: Sequence[int] | None = None,
             min_df_cap: int = 8) -> dict[tuple[int, int], float]:
    """IDF-weighted cosine of binary features for every pair of nodes sharing a kept feature: one in
    at most ``max_df`` of the runs and at most ``max_postings`` nodes (a node stands for
    ``weights[i]`` identical runs). With ``kinds``, frequencies count distinct kinds, not runs:
    trials that repeat one opening word for word are one opening, not a template."""
    total = sum(weights) if kinds is None else len(set(kinds))
    post: dict[str, list[int]] = defaultdict(list)
    for i, f in enumerate(feats):
        for x in f:
            post[x].append(i)
    cap = min(_majority(total), max(float(min_df_cap), max_df * total))  # a majority is always template
    norm = [0.0] * len(feats)
    acc: dict[tuple[int, int], float] = defaultdict(float)
    for p in post.values():
        df = sum(weights[i] for i in p) if kinds is None else len({kinds[i] for i in p})
        if df > cap or len(p) > max_postings:
            continue
        w = (math.log(total / df) + 1.0) ** 2
        for i in p:
            norm[i] += w
        for a_i, a in enumerate(p):
            for b in p[a_i + 1:]:
                acc[a, b] += w
    return {k: v / math.sqrt(norm[k[0]] * norm[k[1]]) for k, v in acc.items()}


def _compatible(x: dict[str, str], y: dict[str, str]) -> bool:
    if len(x) > len(y):
        x, y = y, x
    return all(y.get(k, v) == v for k, v in x.items())


def _average_linkage(weights: Sequence[int], sims: dict[tuple[int, int], float], threshold: float,
                     constraints: list[dict[str, str]], cap: float = math.inf) -> list[int]:
    """UPGMA over a sparse graph (missing pairs count 0) with cannot-links: merge the two clusters
    with the highest mean similarity while it is ≥ ``threshold``, their early answers agree and the
    merged cluster holds at most ``cap`` runs."""
    n = len(weights)
    nb: list[dict[int, float]] = [dict() for _ in range(n)]
    for (a, b), s in sims.items():
        nb[a][b] = s * weights[a] * weights[b]
        nb[b][a] = nb[a][b]
    size = list(weights)
    alive = [True] * n
    ver = [0] * n
    root = list(range(n))
    obs = [dict(c) for c in constraints]
    heap = [(-s, a, b, 0, 0) for (a, b), s in sims.items() if s >= threshold]
    heapq.heapify(heap)
    while heap:
        _, a, b, va, vb = heapq.heappop(heap)
        if not (alive[a] and alive[b]) or ver[a] != va or ver[b] != vb or not _compatible(obs[a], obs[b]):
            continue
        if size[a] + size[b] > cap:
            continue
        alive[b] = False
        root[b] = a
        obs[a].update(obs[b])
        for c, s in nb[b].items():
            if c != a:
                nb[a][c] = nb[a].get(c, 0.0) + s
                nb[c][a] = nb[a][c]
                del nb[c][b]
        nb[a].pop(b, None)
        nb[b] = {}
        size[a] += size[b]
        ver[a] += 1
        for c, s in nb[a].items():
            avg = s / (size[a] * size[c])
            if avg >= threshold:
                lo, hi = min(a, c), max(a, c)
                heapq.heappush(heap, (-avg, lo, hi, ver[lo], ver[hi]))

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    return [find(i) for i in range(n)]


def _join_readouts(labels: list[int], views: Sequence[TaskView], weights: Sequence[int],
                   config: GroupingConfig, cap: float = math.inf) -> list[int]:
    """Join clusters whose runs got the same answer to a routine call that is answered differently
    across runs (a state read-out), most specific answer first, never across a cannot-link nor into a
    cluster of more than ``cap`` runs."""
    total = sum(weights)
    made: dict[str, int] = defaultdict(int)
    answers: dict[str, set[str]] = defaultdict(set)
    for v, w in zip(views, weights, strict=True):
        for k, a in v.readouts.items():
            made[k] += w
            answers[k].add(a)
    post: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, v in enumerate(views):
        for k, a in v.readouts.items():
            if made[k] >= config.routine_share * total and len(answers[k]) >= 2:
                post[k, a].append(i)
    parent = {c: c for c in set(labels)}
    obs: dict[int, dict[str, str]] = {c: {} for c in parent}
    size: dict[int, int] = defaultdict(int)
    for i, v in enumerate(views):
        obs[labels[i]].update(v.constraints)
        size[labels[i]] += weights[i]

    def find(c: int) -> int:
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    shared_max = config.state_max_df * total
    for (_, _), nodes in sorted(post.items(), key=lambda kv: (sum(weights[i] for i in kv[1]), kv[0])):
        if len(nodes) < 2 or sum(weights[i] for i in nodes) > shared_max:
            continue
        base = find(labels[nodes[0]])
        for i in nodes[1:]:
            keep, gone = base, find(labels[i])
            if keep == gone or not _compatible(obs[keep], obs[gone]) or size[keep] + size[gone] > cap:
                continue
            if len(obs[keep]) < len(obs[gone]):
                keep, gone = gone, keep
            obs[keep].update(obs[gone])
            size[keep] += size[gone]
            parent[gone] = keep
            base = keep
    return [find(c) for c in labels]


def cluster_tasks(traces: Sequence[Trace], config: GroupingConfig | None = None) -> list[int]:
    """A cluster label per run (the index of a run in its cluster; ``-1`` for a run that shows
    nothing of its task: no opening, no calls)."""
    cfg = config or GroupingConfig()
    views = [task_view(t, cfg) for t in traces]
    n = len(views)
    if n == 0:
        return []
    # the template: words in more than half of the runs; what is left of the opening is the task's
    df: dict[str, int] = defaultdict(int)
    for v in views:
        for w in v.words:
            df[w] += 1
    common = {w for w, c in df.items() if c > _majority(n)}
    # exact repeats (the same differing opening, or nothing but the same identifiers) are one node; a
    # node's view is its member with the least digest, and nodes are ordered by it, so that neither
    # depends on the order the runs came in
    digest = [_digest(repr((sorted(v.words), sorted(v.entities), sorted(v.constraints.items()),
                            sorted(v.readouts.items())))) for v in views]
    nodes: dict[tuple[Any, ...], int] = {}
    node_of: list[int] = []
    reps: list[int] = []
    for i, v in enumerate(views):
        rest = v.words - common
        if not rest and not v.entities and not v.constraints:
            node_of.append(-1)
            continue
        answers = tuple(sorted(v.constraints.items()))
        key = ("words", rest, answers) if rest else ("ids", v.entities, answers)
        if key not in nodes:
            nodes[key] = len(reps)
            reps.append(i)
        elif digest[i] < digest[reps[nodes[key]]]:
            reps[nodes[key]] = i
        node_of.append(nodes[key])
    order = sorted(range(len(reps)), key=lambda k: digest[reps[k]])
    rank = {k: r for r, k in enumerate(order)}
    reps = [reps[k] for k in order]
    node_of = [rank[k] if k >= 0 else -1 for k in node_of]
    weights = [0] * len(reps)
    for k in node_of:
        if k >= 0:
            weights[k] += 1
    rv = [views[i] for i in reps]
    openings: dict[frozenset[str], int] = {}
    kinds = [openings.setdefault(v.words, len(openings)) for v in rv]
    s_text = _cosines([v.words for v in rv], weights, cfg.text_max_df, cfg.max_postings, kinds, cfg.min_df_cap)
    s_ent = _cosines([v.entities for v in rv], weights, cfg.entity_max_df, cfg.max_postings, None, cfg.min_df_cap)
    sims = dict(s_text)
    for pair, s in s_ent.items():
        if s > sims.get(pair, 0.0):
            sims[pair] = s
    # a task is a small share of an agent's runs: a merge that would make a group of more than
    # ``group_max_share`` of them (``min_df_cap`` runs at least) joins tasks that nothing told apart,
    # and grouped folds over two or three such lumps measure a shift between kinds of task, not new tasks
    cap = max(float(cfg.min_df_cap), cfg.group_max_share * n)
    labels = _average_linkage(weights, sims, cfg.threshold, [v.constraints for v in rv], cap)
    labels = _join_readouts(labels, rv, weights, cfg, cap)
    first: dict[int, int] = {}
    out = []
    for i, k in enumerate(node_of):
        if k < 0:
            out.append(-1)
            continue
        out.append(first.setdefault(labels[k], i))
    return out


def group_runs(traces: Sequence[Trace], task_ids: Sequence[str | None], *,
               config: GroupingConfig | None = None) -> list[str]:
    """A group per run: ``task:<id>`` where the caller gave a task id, else a task recovered from
    the runs without one (:func:`cluster_tasks`, module docstring), named ``req:<index of its first
    run>``; a run that shows nothing of its task is alone (``run:<index>``).

    Pass one agent's runs: the template is what the runs have in common.

    Raises:
        InputError: ``task_ids`` is not one id (or None) a trace.
    """
    if len(traces) != len(task_ids):
        raise InputError(f"one task id (or None) a trace; got {len(task_ids)} for {len(traces)}", path="task_ids")
    todo = [i for i, t in enumerate(task_ids) if t is None]
    labels = cluster_tasks([traces[i] for i in todo], config)
    out: list[str] = [f"task:{t}" for t in task_ids]
    for i, lab in zip(todo, labels, strict=True):
        out[i] = f"run:{i}" if lab < 0 else f"req:{todo[lab]}"
    return out


__all__ = ["GroupingConfig", "TaskView", "cluster_tasks", "group_runs", "task_view"]
