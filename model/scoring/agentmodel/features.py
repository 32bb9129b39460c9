"""The agent model's features: what a run looks like, counted so that a prefix costs O(1) per step.

Two blocks, both running sums over the steps, so the state of a prefix is updated in constant time
per step (bounded by the step's own words: 2,000 characters, 300 words) whatever the run's length:

* **shape** (:data:`SHAPE_FEATURES`): messages, steps, turns of each role, calls, results, errors,
  repeated calls, distinct tools, characters, time where the steps carry it; ``log1p`` of each. The
  model learns their sign and scale per agent (on some agents failed runs are the long ones, on
  others the short ones).
* **n-grams**: role-prefixed words of each step and their within-step bigrams (``user:refund``,
  ``asst:sorry``, ``result:not found``), plus ``CALL:<tool>`` and ``ERR:<tool>`` tokens, hashed
  (CRC-32) into ``buckets`` columns. The artefact stores the weights of the buckets it learned, not a
  vocabulary, so it stays small; serving hashes the same way from the same spec.

The n-gram vector of a run is TF-IDF-like: ``idf[b] · log1p(count[b])``, L2-normalised. The prefix
state keeps the counts, the running dot product with the weights and the running squared norm, so a
step changes only the buckets it touches.

:class:`FeatureCache` keeps each run's prefix rows (:class:`RunRows`) by content hash, so refits and
the learning curve count a run's steps once.

>>> from model.core.schema import Step, StepKind
>>> st = RunCounts.empty()
>>> st.add(Step(kind=StepKind.USER_INPUT, content="Cancel my flight", source_index=0), 1 << 12)
>>> round(float(st.shape[SHAPE_FEATURES.index("user_turns")]), 3)
1.0
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from model.core.schema import Step, StepKind, StepStatus, Trace
from model.scoring.agentmodel.encoded import encode_missing, prefix_rows

if TYPE_CHECKING:
    from model.scoring.encoder import StaticEncoder

#: Characters and words of a step that the n-grams read (the cheap TF-IDF learner reads the same).
MAX_CHARS = 2000
MAX_WORDS = 300
_WORD = re.compile(r"[a-z_][a-z_]+")

#: The run-shape features, in column order (raw counts; the model reads ``log1p`` of each).
SHAPE_FEATURES: tuple[str, ...] = (
    "messages", "steps", "user_turns", "assistant_turns", "reasoning_steps", "calls", "results",
    "errors", "repeated_calls", "distinct_tools", "characters", "assistant_characters",
    "result_characters", "final_outputs", "seconds",
)
_IDX = {n: i for i, n in enumerate(SHAPE_FEATURES)}

_ROLE = {
    StepKind.USER_INPUT: "user",
    StepKind.LLM_OUTPUT: "asst",
    StepKind.FINAL_OUTPUT: "asst",
    StepKind.LLM_REASONING: "think",
    StepKind.TOOL_CALL: "arg",
    StepKind.TOOL_RESULT: "result",
    StepKind.ERROR: "error",
}


def is_error(step: Step) -> bool:
    """A step that reports an error: its status, its kind, or a non-zero return code it carries."""
    if step.kind == StepKind.ERROR or step.status in (StepStatus.ERROR, StepStatus.TIMEOUT):
        return True
    rc = step.metadata.get("returncode") if step.metadata else None
    return isinstance(rc, int) and rc != 0


def _call_key(step: Step) -> str:
    args = step.tool_args if step.tool_args is not None else step.tool_args_raw or step.content
    try:
        text = json.dumps(args, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = str(args)
    return f"{step.tool_name}\x00{text}"


def step_tokens(step: Step) -> list[str]:
    """The n-gram tokens of one step: role-prefixed words, their bigrams, call / error tokens."""
    role = _ROLE.get(step.kind)
    if role is None:  # system prompts: the same on every run of an agent
        return []
    out: list[str] = []
    if step.kind == StepKind.TOOL_CALL:
        out.append(f"CALL:{step.tool_name}")
    if step.kind == StepKind.TOOL_RESULT and is_error(step):
        out.append(f"ERR:{step.tool_name}")
    words = _WORD.findall(step.content[:MAX_CHARS].lower())[:MAX_WORDS]
    out.extend(f"{role}:{w}" for w in words)
    out.extend(f"{role}:{a} {b}" for a, b in zip(words, words[1:], strict=False))
    return out


def last_tokens(step: Step) -> list[str]:
    """The tokens of the run's latest assistant message (``last:`` words and bigrams): what the agent
    said last weighs apart from the same words earlier in the run (its closing answer or its latest
    claim). A later assistant message replaces them."""
    words = _WORD.findall(step.content[:MAX_CHARS].lower())[:MAX_WORDS]
    return [f"last:{w}" for w in words] + [f"last:{a} {b}" for a, b in zip(words, words[1:], strict=False)]


def bucket(token: str, buckets: int) -> int:
    """The column of a token: CRC-32 of its UTF-8 bytes modulo ``buckets`` (stable across runs)."""
    return zlib.crc32(token.encode("utf-8")) % buckets


def token_buckets(tokens: Sequence[str], buckets: int) -> list[int]:
    """:func:`bucket` of each token (inlined: the hot loop of counting)."""
    crc = zlib.crc32
    return [crc(t.encode("utf-8")) % buckets for t in tokens]


def step_buckets(step: Step, buckets: int) -> list[int]:
    return token_buckets(step_tokens(step), buckets)


@dataclass
class RunCounts:
    """What a run (or a prefix of it) has shown so far: shape counts and n-gram bucket counts.

    ``add`` costs O(words of the step); nothing here grows with the number of steps except the
    bucket counts and the set of call keys (hash tables: O(1) per step).
    """

    shape: np.ndarray
    counts: dict[int, int] = field(default_factory=dict)
    last: list[int] = field(default_factory=list)  # buckets of the latest assistant message's last: tokens
    call_keys: set[str] = field(default_factory=set)
    tools: set[str] = field(default_factory=set)
    last_source: int | None = None
    first_time: float | None = None
    last_time: float | None = None

    @classmethod
    def empty(cls) -> RunCounts:
        return cls(shape=np.zeros(len(SHAPE_FEATURES)))

    def add(self, step: Step, buckets: int, last_turn: bool = False) -> dict[int, int]:
        """Count one step; returns the change of each bucket it touched (``last_turn``: an assistant
        message also replaces the ``last:`` tokens of the one before, so some changes are negative)."""
        s = self.shape
        if step.source_index != self.last_source:
            s[_IDX["messages"]] += 1
            self.last_source = step.source_index
        s[_IDX["steps"]] += 1
        n = len(step.content)
        s[_IDX["characters"]] += n
        k = step.kind
        if k == StepKind.USER_INPUT:
            s[_IDX["user_turns"]] += 1
        elif k in (StepKind.LLM_OUTPUT, StepKind.FINAL_OUTPUT):
            s[_IDX["assistant_turns"]] += 1
            s[_IDX["assistant_characters"]] += n
            if k == StepKind.FINAL_OUTPUT:
                s[_IDX["final_outputs"]] += 1
        elif k == StepKind.LLM_REASONING:
            s[_IDX["reasoning_steps"]] += 1
        elif k == StepKind.TOOL_CALL:
            s[_IDX["calls"]] += 1
            key = _call_key(step)
            if key in self.call_keys:
                s[_IDX["repeated_calls"]] += 1
            else:
                self.call_keys.add(key)
            if step.tool_name and step.tool_name not in self.tools:
                self.tools.add(step.tool_name)
                s[_IDX["distinct_tools"]] += 1
        elif k == StepKind.TOOL_RESULT:
            s[_IDX["results"]] += 1
            s[_IDX["result_characters"]] += n
        if is_error(step):
            s[_IDX["errors"]] += 1
        if step.timestamp is not None:
            t = step.timestamp.timestamp()
            self.first_time = t if self.first_time is None else min(self.first_time, t)
            self.last_time = t if self.last_time is None else max(self.last_time, t)
            s[_IDX["seconds"]] = self.last_time - self.first_time
        delta: dict[int, int] = {}
        for b in step_buckets(step, buckets):
            delta[b] = delta.get(b, 0) + 1
        if last_turn and k in (StepKind.LLM_OUTPUT, StepKind.FINAL_OUTPUT) and step.content:
            for b in self.last:
                delta[b] = delta.get(b, 0) - 1
            self.last = token_buckets(last_tokens(step), buckets)
            for b in self.last:
                delta[b] = delta.get(b, 0) + 1
        c = self.counts
        for b, d in delta.items():
            v = c.get(b, 0) + d
            if v:
                c[b] = v
            else:
                c.pop(b, None)
        return delta


def shape_row(shape: np.ndarray) -> np.ndarray:
    """The shape block as the model reads it: ``log1p`` of the counts."""
    return np.asarray(np.log1p(np.maximum(shape, 0.0)), dtype=float)


def prefix_lengths(n_steps: int, fractions: Sequence[float]) -> list[int]:
    """Steps kept for each prefix fraction: ``ceil(f · n)``, at least one step (where there is one)."""
    return [max(1, min(n_steps, int(np.ceil(f * n_steps - 1e-9)))) if n_steps else 0 for f in fractions]


def count_prefixes(trace: Trace, buckets: int, fractions: Sequence[float], last_turn: bool = False) -> list[RunCounts]:
    """One pass over the trace, a snapshot of the counts at each prefix fraction (ascending)."""
    cuts = prefix_lengths(len(trace.steps), fractions)
    out: list[RunCounts] = []
    st = RunCounts.empty()
    want = iter(sorted(set(cuts)))
    snaps: dict[int, RunCounts] = {}
    nxt = next(want, None)
    if nxt == 0:
        snaps[0] = _copy(st)
        nxt = next(want, None)
    for i, step in enumerate(trace.steps, 1):
        st.add(step, buckets, last_turn)
        while nxt is not None and i == nxt:
            snaps[i] = _copy(st)
            nxt = next(want, None)
    for c in cuts:
        out.append(snaps[c])
    return out


def _copy(st: RunCounts) -> RunCounts:
    return RunCounts(shape=st.shape.copy(), counts=dict(st.counts), last=list(st.last))


def trace_key(trace: Trace) -> str:
    """A content hash of the trace's steps (the feature cache's key): same steps, same features."""
    d = hashlib.blake2b(digest_size=16)
    for s in trace.steps:
        d.update(f"{s.kind}\x00{s.tool_name}\x00{s.source_index}\x00{s.status}\x00{s.content}".encode("utf-8", "replace"))
        d.update(b"\x01")
    return d.hexdigest()


def to_state(st: RunCounts) -> dict[str, Any]:
    """JSON-able form of the counts (a session's state, continued by any worker)."""
    return {"shape": st.shape.tolist(), "counts": {str(k): v for k, v in st.counts.items()},
            "call_keys": sorted(st.call_keys), "tools": sorted(st.tools), "last_source": st.last_source,
            "first_time": st.first_time, "last_time": st.last_time, "last": list(st.last)}


def from_state(d: dict[str, Any]) -> RunCounts:
    return RunCounts(shape=np.asarray(d["shape"], dtype=float), counts={int(k): int(v) for k, v in d["counts"].items()},
                     call_keys=set(d["call_keys"]), tools=set(d["tools"]), last_source=d["last_source"],
                     first_time=d["first_time"], last_time=d["last_time"], last=[int(b) for b in d.get("last", [])])


@dataclass
class RunRows:
    """One run's cached features at each prefix fraction: counts, shape rows, log1p bucket counts."""

    counts: list[RunCounts]
    shape: np.ndarray  # fractions × shape features (raw counts)
    grams: sp.csr_matrix  # fractions × buckets, log1p(count)
    emb: np.ndarray | None = None  # fractions × 4·dim: the encoder block (encoded.prefix_rows), when asked


#: The prefixes every first count of a run snapshots as well (the model's own CV reads them at the
#: early-warning point): one pass over a run's steps serves every later request.
SNAPSHOT_FRACTIONS = (0.25, 0.5, 0.75, 1.0)


class FeatureCache:
    """Each run's prefix features, keyed by the trace's content hash (a warm cache makes a refit cost
    only the optimisation). A run's steps are counted once: the snapshots at every fraction asked
    for so far (and :data:`SNAPSHOT_FRACTIONS`) are kept, and each fractions tuple's rows built from them.
    ``encoder``: the static encoder of the rows' encoder block (``rows(..., encoded=True)``; default the
    shipped one, loaded when first asked); each run's steps are encoded once."""

    def __init__(self, encoder: StaticEncoder | None = None) -> None:
        self.encoder = encoder
        self._vectors: dict[str, np.ndarray] = {}
        self._partial: set[str] = set()  # runs whose vectors came from add_vectors (not checked yet)
        self._d: dict[tuple[str, int, tuple[float, ...], bool], RunRows] = {}
        self._snaps: dict[tuple[str, int, bool], dict[float, RunCounts]] = {}
        self._keys: dict[int, tuple[Trace, str]] = {}

    def _key(self, trace: Trace) -> str:
        hit = self._keys.get(id(trace))
        if hit is not None and hit[0] is trace:
            return hit[1]
        k = trace_key(trace)
        self._keys[id(trace)] = (trace, k)
        return k

    def vectors(self, trace: Trace) -> np.ndarray:
        """Each step's encoder vector (:func:`~model.scoring.agentmodel.encoded.encode_steps`), once a run:
        the rows :meth:`add_vectors` gave are not encoded again."""
        from model.scoring.encoder import shared_encoder  # tokenizers and the table: only when asked

        if self.encoder is None:
            self.encoder = shared_encoder()
        tk = self._key(trace)
        hit = self._vectors.get(tk)
        if hit is None or tk in self._partial:  # stored rows: encode only the steps they lack
            self._partial.discard(tk)
            hit = self._vectors[tk] = encode_missing(self.encoder, trace.steps, hit)
        return hit

    def add_vectors(self, trace: Trace, vectors: np.ndarray) -> None:
        """Give the run's step vectors encoded before (a stored run's: ``len(trace.steps) × dim``, NaN
        where a step was not encoded), so that :meth:`vectors` encodes only what they lack. They must be
        the cache encoder's (its ``version``; the caller checks)."""
        if vectors.ndim != 2 or vectors.shape[0] != len(trace.steps):
            raise ValueError(f"need one vector a step ({len(trace.steps)}); got shape {vectors.shape}")
        if self.encoder is not None and vectors.shape[1] != self.encoder.dim:
            raise ValueError(f"vectors of {vectors.shape[1]} dimensions for an encoder of {self.encoder.dim}")
        tk = self._key(trace)
        self._vectors[tk] = np.array(vectors, dtype=np.float32)
        self._partial.add(tk)

    def rows(self, trace: Trace, buckets: int, fractions: tuple[float, ...], last_turn: bool = False,
             encoded: bool = False) -> RunRows:
        """The run's rows at ``fractions`` (``encoded``: with the encoder block)."""
        hit = self._rows(trace, buckets, fractions, last_turn)
        if encoded and hit.emb is None:
            hit.emb = prefix_rows(self.vectors(trace), trace.steps, prefix_lengths(len(trace.steps), fractions))
        return hit

    def _rows(self, trace: Trace, buckets: int, fractions: tuple[float, ...], last_turn: bool) -> RunRows:
        tk = self._key(trace)
        key = (tk, buckets, fractions, last_turn)
        hit = self._d.get(key)
        if hit is None:
            snaps = self._snaps.setdefault((tk, buckets, last_turn), {})
            if any(f not in snaps for f in fractions):
                want = tuple(sorted({*fractions, *SNAPSHOT_FRACTIONS, *snaps}))
                for f, c in zip(want, count_prefixes(trace, buckets, want, last_turn), strict=True):
                    snaps.setdefault(f, c)
            counts = [snaps[f] for f in fractions]
            indptr = [0]
            ind: list[int] = []
            val: list[float] = []
            for c in counts:
                for b, k in sorted(c.counts.items()):
                    ind.append(b)
                    val.append(math.log1p(k))
                indptr.append(len(ind))
            grams = sp.csr_matrix((np.asarray(val, float), np.asarray(ind, np.int64), np.asarray(indptr, np.int64)),
                                  shape=(len(counts), buckets))
            hit = RunRows(counts, np.array([c.shape for c in counts]), grams)
            self._d[key] = hit
        return hit

    def get(self, trace: Trace, buckets: int, fractions: tuple[float, ...], last_turn: bool = False) -> list[RunCounts]:
        return self.rows(trace, buckets, fractions, last_turn).counts

    def __len__(self) -> int:
        return len(self._d)


__all__ = ["MAX_CHARS", "MAX_WORDS", "SHAPE_FEATURES", "SNAPSHOT_FRACTIONS", "FeatureCache", "RunCounts", "RunRows", "bucket", "count_prefixes", "from_state",
           "is_error", "last_tokens", "prefix_lengths", "shape_row", "step_buckets", "step_tokens", "to_state", "token_buckets", "trace_key"]
