"""Where a failed run went wrong, learned from one agent's own labelled failing messages.

A :class:`WhereModel` is a conditional logit over a run's **messages** (the steps of one
``source_index``; system messages are never candidates): ``softmax(x_m · w)`` over the messages
``m`` of a failed run is the probability that ``m`` is where it went wrong. Two blocks of features:

* **position** — the agent's own position prior: one-hots of the message's relative position (ten
  bins), of its ordinal from the start and from the end (0 … 7, 8+). Fitted alone (``content=False``)
  it *is* the prior of that agent's labelled failing messages, smoothed by its L2 penalty;
* **content** — what the message is: its step kinds, speaker, tools, error status, error words, the
  kind / error status of its neighbours, the domain-general cues of
  :func:`model.scoring.runscore.features.message_features` (a figure no input holds, an error passed over,
  a repeated call, a hedge, …) and hashed role-prefixed word 1–2-grams (sublinear tf, unit norm).

The penalties are chosen by grouped cross-validation **inside** the runs given to :meth:`fit`
(groups = tasks), on the held-out log-likelihood of the labelled message; nothing is chosen on the
runs it is judged on. numpy / scipy only; :meth:`WhereModel.to_dict` is plain JSON.

Served per agent where ``triage retrain`` kept it (:mod:`model.training.agentmodel.where_served`):
the artefact ``where.json`` beside the agent model's (:meth:`model.scoring.agent_registry.Registry.load_where`).
The measurement is :mod:`model.training.agentmodel.where`.

>>> from model.data.realdata import load_source                     # doctest: +SKIP
>>> runs = [r for r in load_source("whowhen")]                   # doctest: +SKIP
>>> m = WhereModel().fit([r.trace for r in runs], [r.fail_source_index for r in runs],
...                      [r.group for r in runs])                # doctest: +SKIP
>>> m.locate(runs[0].trace)                                      # doctest: +SKIP
(0, 0.41)
"""

from __future__ import annotations

import math
import re
import zlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse
from scipy.optimize import minimize

from model.core.errors import InputError, NotFittedError
from model.core.metrics import fold_by_group
from model.core.schema import StepKind, StepStatus, Trace
from model.scoring.runscore.features import (
    MESSAGE_FEATURES,
    is_error_step,
    message_features,
    scan_text,
    step_text,
)

FORMAT_VERSION = 1

#: Hashed n-gram buckets (a power of two).
HASH_DIM = 1 << 14
#: Characters of one message's text whose n-grams are hashed.
TEXT_CHARS = 2000
REL_BINS = 10
ORDINALS = 8  # 0 … 7, then "8 or more"

#: The position block: relative-position bins, ordinal from the start, ordinal from the end.
POSITION_DIM = REL_BINS + 2 * (ORDINALS + 1)
_KINDS = tuple(k.value for k in StepKind)
_RS_COLUMNS = ("has_call", "is_final", "novel_numbers", "novel_names", "novel_word_ratio", "after_error",
               "error_passed_over", "repeat_call", "hedge", "length_log", "empty", "after_user")
_DENSE_NAMES: tuple[str, ...] = (
    *(f"kind_{k}" for k in _KINDS), "status_error", "is_error_result", "error_words_log",
    "prev_error", "next_error", "prev_user", "next_user", "agent_message",
    *(f"rs_{c}" for c in _RS_COLUMNS),
)
DENSE_DIM = len(_DENSE_NAMES)
#: Columns: position block, dense content block, hashed block (speaker, tools, n-grams).
N_FEATURES = POSITION_DIM + DENSE_DIM + HASH_DIM
_CONTENT_START = POSITION_DIM

_TOKEN = re.compile(r"[a-z][a-z0-9_]{1,24}|\d+")
_ERROR_WORDS = re.compile(
    r"\b(?:error|exception|traceback|failed|failure|invalid|not found|denied|refused|incorrect|wrong)\b",
    re.IGNORECASE)
_RS_INDEX = [MESSAGE_FEATURES.index(c) for c in _RS_COLUMNS]

#: Candidate penalties (the inner grouped CV picks one per block).
L2_GRID: tuple[float, ...] = (0.3, 1.0, 3.0, 10.0, 30.0)


@dataclass(frozen=True)
class Message:
    """One candidate message: its ``source_index`` and its steps (indices into ``Trace.steps``)."""

    source_index: int
    steps: tuple[int, ...]


def messages(trace: Trace) -> list[Message]:
    """The trace's candidate messages in order: every ``source_index`` with a non-system step."""
    by: dict[int, list[int]] = defaultdict(list)
    for i, s in enumerate(trace.steps):
        if s.kind is not StepKind.SYSTEM:
            by[s.source_index].append(i)
    return [Message(si, tuple(ix)) for si, ix in sorted(by.items())]


def _bucket(token: str) -> int:
    return _CONTENT_START + DENSE_DIM + zlib.crc32(token.encode("utf-8")) % HASH_DIM


def _position_rows(n: int) -> list[list[int]]:
    rows = []
    for k in range(n):
        rel = k / (n - 1) if n > 1 else 1.0
        b = min(REL_BINS - 1, int(rel * REL_BINS))
        rows.append([b, REL_BINS + min(k, ORDINALS), REL_BINS + ORDINALS + 1 + min(n - 1 - k, ORDINALS)])
    return rows


def featurise(trace: Trace) -> tuple[list[Message], sparse.csr_matrix]:
    """The candidate messages of ``trace`` and their feature rows (:data:`N_FEATURES` columns)."""
    msgs = messages(trace)
    n = len(msgs)
    if n == 0:
        return msgs, sparse.csr_matrix((0, N_FEATURES))
    units, X_rs = message_features(trace)
    rs_row = {u.source_index: k for k, u in enumerate(units)}
    steps = trace.steps
    err = [any(is_error_step(steps[i]) for i in m.steps) for m in msgs]
    user = [any(steps[i].kind is StepKind.USER_INPUT for i in m.steps) for m in msgs]
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    col_dense = {name: _CONTENT_START + j for j, name in enumerate(_DENSE_NAMES)}
    for k, (m, pos) in enumerate(zip(msgs, _position_rows(n), strict=True)):
        feats: dict[int, float] = dict.fromkeys(pos, 1.0)
        kinds = {steps[i].kind.value for i in m.steps}
        for kv in kinds:
            feats[col_dense[f"kind_{kv}"]] = 1.0
        if any(steps[i].status in (StepStatus.ERROR, StepStatus.TIMEOUT) for i in m.steps):
            feats[col_dense["status_error"]] = 1.0
        if err[k]:
            feats[col_dense["is_error_result"]] = 1.0
        text = "\n".join(scan_text(step_text(steps[i])) for i in m.steps)
        n_err = len(_ERROR_WORDS.findall(text))
        if n_err:
            feats[col_dense["error_words_log"]] = math.log1p(n_err)
        for name, flag in (("prev_error", k > 0 and err[k - 1]), ("next_error", k + 1 < n and err[k + 1]),
                           ("prev_user", k > 0 and user[k - 1]), ("next_user", k + 1 < n and user[k + 1])):
            if flag:
                feats[col_dense[name]] = 1.0
        if m.source_index in rs_row:
            feats[col_dense["agent_message"]] = 1.0
            for c, j in zip(_RS_COLUMNS, _RS_INDEX, strict=True):
                v = float(X_rs[rs_row[m.source_index], j])
                if v:
                    feats[col_dense[f"rs_{c}"]] = v
        # hashed: speaker, tools, role-prefixed word 1-2-grams (sublinear tf, unit norm)
        role = steps[m.steps[0]].kind.value
        hashed: dict[int, float] = defaultdict(float)
        speaker = next((steps[i].speaker for i in m.steps if steps[i].speaker), None)
        if speaker:
            hashed[_bucket(f"spk={speaker.lower()}")] += 1.0
            hashed[_bucket(f"spk={speaker.lower()}|{role}")] += 1.0
        for i in m.steps:
            if steps[i].tool_name:
                hashed[_bucket(f"tool={steps[i].tool_name}|{steps[i].kind.value}")] += 1.0
        words = _TOKEN.findall(text[:TEXT_CHARS].lower())
        grams: dict[int, float] = defaultdict(float)
        for a, w in enumerate(words):
            grams[_bucket(f"{role}:{w}")] += 1.0
            if a:
                grams[_bucket(f"{role}:{words[a - 1]} {w}")] += 1.0
        if grams:
            g = {b: 1.0 + math.log(v) for b, v in grams.items()}
            norm = math.sqrt(sum(v * v for v in g.values()))
            for b, v in g.items():
                hashed[b] += v / norm
        for b, v in hashed.items():
            feats[b] = feats.get(b, 0.0) + v
        for b, v in feats.items():
            rows.append(k)
            cols.append(b)
            vals.append(v)
    X = sparse.csr_matrix((np.asarray(vals, dtype=np.float64), (rows, cols)), shape=(n, N_FEATURES))
    return msgs, X


@dataclass
class Prepared:
    msgs: list[Message]
    X: sparse.csr_matrix
    target: int | None  # the labelled message's row, None when unknown / not a candidate
    group: str


def prepare(trace: Trace, failing_index: int | None, group: str) -> Prepared:
    msgs, X = featurise(trace)
    target = None
    if failing_index is not None:
        target = next((k for k, m in enumerate(msgs) if m.source_index == failing_index), None)
    return Prepared(msgs, X, target, group)


def _fit_clogit(items: Sequence[Prepared], penalty: np.ndarray) -> np.ndarray:
    """Conditional-logit weights (per-column L2 ``penalty``; a zero-penalty column is never used)."""
    rows = [p for p in items if p.target is not None and p.X.shape[0] > 1]
    if not rows:
        return np.zeros(N_FEATURES)
    X = sparse.vstack([p.X for p in rows]).tocsr()
    sizes = np.array([p.X.shape[0] for p in rows])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    group = np.repeat(np.arange(len(rows)), sizes)
    tgt = starts + np.array([p.target for p in rows])
    used = np.unique(X.indices)
    used = used[penalty[used] < _OFF]  # a block switched off is left out, not shrunk
    Xu = X[:, used]
    pen = penalty[used]
    xt = np.asarray(Xu[tgt].sum(axis=0)).ravel()

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        z = Xu @ w
        zmax = np.maximum.reduceat(z, starts)
        e = np.exp(z - zmax[group])
        den = np.add.reduceat(e, starts)
        val = -(z[tgt] - zmax - np.log(den)).sum() + 0.5 * float((pen * w * w).sum())
        p = e / den[group]
        grad = Xu.T @ p - xt + pen * w
        return float(val), np.asarray(grad)

    res = minimize(loss, np.zeros(len(used)), jac=True, method="L-BFGS-B", options={"maxiter": 300})
    w = np.zeros(N_FEATURES)
    w[used] = res.x
    return w


_OFF = 1e12


def _penalty(l2_position: float, l2_content: float | None) -> np.ndarray:
    pen = np.full(N_FEATURES, l2_position)
    pen[_CONTENT_START:] = _OFF if l2_content is None else l2_content  # None: the position prior alone
    return pen


def _loglik(w: np.ndarray, items: Sequence[Prepared]) -> float:
    out = 0.0
    for p in items:
        if p.target is None:
            continue
        z = p.X @ w
        out += float(z[p.target] - z.max() - np.log(np.exp(z - z.max()).sum()))
    return out


def inner_folds(items: Sequence[Prepared], n: int, seed: int) -> list[np.ndarray]:
    """``n`` folds of ``items``, each task group in one fold (:func:`~model.core.metrics.fold_by_group`)."""
    return fold_by_group([p.group for p in items], n, seed)


class WhereModel:
    """Learned attribution of one agent: which message of a failed run is where it went wrong.

    Parameters
    ----------
    content:
        Use the content block (``False``: the agent's position prior alone).
    l2_grid:
        Candidate L2 penalties; the position block's and then the content block's are chosen in turn
        by grouped ``inner_folds``-fold cross-validation on the runs given to :meth:`fit`.
    inner_folds, seed:
        The inner cross-validation (fewer than ``inner_folds`` task groups: the middle of the grid).
    """

    def __init__(self, *, content: bool = True, l2_grid: Sequence[float] = L2_GRID, inner_folds: int = 3,
                 seed: int = 0) -> None:
        self.content = content
        self.l2_grid = tuple(l2_grid)
        self.inner_folds = inner_folds
        self.seed = seed

    # -- fitting ------------------------------------------------------------------------------

    def fit(self, traces: Sequence[Trace], failing_index: Sequence[int | None], groups: Sequence[str]) -> WhereModel:
        """Fit on failed runs: ``failing_index[i]`` is the ``source_index`` of the message where
        ``traces[i]`` went wrong (``None``: unknown, the run is left out); ``groups[i]`` its task.

        Raises :class:`~model.core.errors.InputError` when the lengths differ or no run has a labelled
        message among its candidates (and at least two messages).
        """
        if not len(traces) == len(failing_index) == len(groups):
            raise InputError(f"traces, failing_index and groups must have one entry per run; got "
                             f"{len(traces)}, {len(failing_index)}, {len(groups)}", path="failing_index")
        items = [prepare(t, f, g) for t, f, g in zip(traces, failing_index, groups, strict=True)]
        return self._fit_prepared(items)

    def _fit_prepared(self, items: Sequence[Prepared]) -> WhereModel:
        usable = [p for p in items if p.target is not None and p.X.shape[0] > 1]
        if not usable:
            raise InputError("no run has its labelled failing message among two or more candidate messages; "
                             f"got {len(items)} run(s)", path="failing_index")
        self.l2_position_ = self._choose(usable, lambda c: _penalty(c, None))
        self.l2_content_: float | None = None
        if self.content:
            self.l2_content_ = self._choose(usable, lambda c: _penalty(self.l2_position_, c))
        self.coef_ = _fit_clogit(usable, _penalty(self.l2_position_, self.l2_content_))
        self.n_runs_ = len(usable)
        return self

    def _choose(self, items: Sequence[Prepared], penalty: Callable[[float], np.ndarray]) -> float:
        folds = inner_folds(items, self.inner_folds, self.seed)
        if len({p.group for p in items}) < self.inner_folds or any(len(f) == 0 for f in folds):
            return self.l2_grid[len(self.l2_grid) // 2]
        best, best_ll = self.l2_grid[0], -math.inf
        for c in self.l2_grid:
            ll = 0.0
            for f in folds:
                test = set(f.tolist())
                w = _fit_clogit([p for i, p in enumerate(items) if i not in test], penalty(c))
                ll += _loglik(w, [items[i] for i in f])
            if ll > best_ll:
                best, best_ll = c, ll
        return best

    # -- use ---------------------------------------------------------------------------------

    def _check(self) -> None:
        if not hasattr(self, "coef_"):
            raise NotFittedError("this WhereModel is not fitted: call fit(traces, failing_index, groups) "
                                 "or WhereModel.from_dict(...)")

    def _probs(self, X: sparse.csr_matrix) -> np.ndarray:
        z = X @ self.coef_
        e = np.exp(z - z.max())
        out: np.ndarray = e / e.sum()
        return out

    def probabilities(self, trace: Trace) -> list[tuple[int, float]]:
        """``(source_index, probability)`` of every candidate message, given that the run failed."""
        self._check()
        msgs, X = featurise(trace)
        if not msgs:
            return []
        return [(m.source_index, float(p)) for m, p in zip(msgs, self._probs(X), strict=True)]

    def locate(self, trace: Trace) -> tuple[int, float]:
        """The ``source_index`` of the most likely failing message and its probability.

        Raises :class:`~model.core.errors.InputError` when the trace has no candidate message.
        """
        probs = self.probabilities(trace)
        if not probs:
            raise InputError(f"trace {trace.id}: no message to attribute (only system steps, or none)",
                             path="steps")
        return max(probs, key=lambda sp: sp[1])

    def _locate_prepared(self, p: Prepared) -> int:
        return int(np.argmax(self._probs(p.X)))

    # -- serialisation -----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        self._check()
        nz = np.flatnonzero(self.coef_)
        return {"format": "where", "format_version": FORMAT_VERSION, "hash_dim": HASH_DIM,
                "n_features": N_FEATURES, "content": self.content, "l2_grid": list(self.l2_grid),
                "inner_folds": self.inner_folds, "seed": self.seed, "l2_position": self.l2_position_,
                "l2_content": self.l2_content_, "n_runs": self.n_runs_,
                "coef": {"index": nz.tolist(), "value": [float(v) for v in self.coef_[nz]]}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WhereModel:
        if d.get("format") != "where" or d.get("format_version") != FORMAT_VERSION or d.get("n_features") != N_FEATURES:
            raise InputError(f"not a where model of format {FORMAT_VERSION} with {N_FEATURES} features; got "
                             f"{d.get('format')!r} v{d.get('format_version')!r}, {d.get('n_features')!r}",
                             path="format_version")
        m = cls(content=bool(d["content"]), l2_grid=d["l2_grid"], inner_folds=int(d["inner_folds"]),
                seed=int(d["seed"]))
        m.l2_position_ = float(d["l2_position"])
        m.l2_content_ = None if d["l2_content"] is None else float(d["l2_content"])
        m.n_runs_ = int(d["n_runs"])
        coef = np.zeros(N_FEATURES)
        coef[np.asarray(d["coef"]["index"], dtype=np.int64)] = d["coef"]["value"]
        m.coef_ = coef
        return m


__all__ = ["FORMAT_VERSION", "HASH_DIM", "L2_GRID", "N_FEATURES", "Message", "Prepared", "WhereModel", "featurise",
           "inner_folds", "messages", "prepare"]
