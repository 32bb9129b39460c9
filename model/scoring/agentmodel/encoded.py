"""The agent model's encoder block: what the run *says*, read by the static sentence encoder.

Each step but the system prompt is encoded once (:func:`step_text` → :class:`~model.scoring.encoder.StaticEncoder`)
and folded into a :class:`Pool` of four vectors, so a prefix costs O(1) per step:

* the mean of every step's vector so far;
* the first user message's (what was asked);
* the latest assistant message's (what the agent said last: its answer or its latest claim);
* the latest step's (where the run stands).

The block is their concatenation (``4 × dim``), centred and scaled by the model
(:mod:`model.scoring.agentmodel.fitting`). A pool is stored as float16 (``to_dict``): a session's
state carries it, so a step already encoded is never encoded again.

A step's vector is rounded to float16 where it is made (:func:`encode_steps`): the service stores
each run's step vectors as float16 (:func:`pack`; ``serve/store/encodings.py``) and a retrain reads
them back, so a stored vector, a fresh one and the one a served model pooled are the same numbers.

>>> import numpy as np
>>> from model.core.schema import Step, StepKind
>>> p = Pool.empty(2)
>>> p.add(np.array([1.0, 0.0]), StepKind.USER_INPUT); p.add(np.array([0.0, 1.0]), StepKind.LLM_OUTPUT)
>>> p.row().tolist()
[0.5, 0.5, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from model.core.schema import Step, StepKind

if TYPE_CHECKING:
    from model.scoring.encoder import StaticEncoder

#: Characters of a step the encoder reads (a tool call's arguments: the first 300).
TEXT_CHARS = 1500
CALL_CHARS = 300

_ROLE = {
    StepKind.USER_INPUT: "user",
    StepKind.LLM_OUTPUT: "assistant",
    StepKind.FINAL_OUTPUT: "assistant",
    StepKind.LLM_REASONING: "thought",
    StepKind.TOOL_CALL: "call",
    StepKind.TOOL_RESULT: "result",
    StepKind.ERROR: "error",
}
_ASSISTANT = (StepKind.LLM_OUTPUT, StepKind.FINAL_OUTPUT)

#: How a step's vector is kept and stored (float16: 512 bytes a step at 256 dimensions).
STORED_DTYPE = "<f2"

def step_text(step: Step) -> str | None:
    """What the encoder reads of one step (``None``: a system prompt, the same on every run)."""
    role = _ROLE.get(step.kind)
    if role is None:
        return None
    if step.kind == StepKind.TOOL_CALL:
        return f"call {step.tool_name or ''}: {step.content[:CALL_CHARS]}"
    tool = f" {step.tool_name}" if step.kind == StepKind.TOOL_RESULT and step.tool_name else ""
    return f"{role}{tool}: {step.content[:TEXT_CHARS]}"


@dataclass
class Pool:
    """The pooled vectors of a run so far (see the module docstring)."""

    total: np.ndarray
    n: int
    first_user: np.ndarray | None = None
    last_assistant: np.ndarray | None = None
    last: np.ndarray | None = None

    @classmethod
    def empty(cls, dim: int) -> Pool:
        return cls(total=np.zeros(dim), n=0)

    @property
    def dim(self) -> int:
        return int(self.total.shape[0])

    def add(self, vec: np.ndarray, kind: StepKind) -> None:
        """Fold one encoded step in."""
        v = np.asarray(vec, dtype=np.float64)
        self.total = self.total + v
        self.n += 1
        if kind == StepKind.USER_INPUT and self.first_user is None:
            self.first_user = v
        if kind in _ASSISTANT:
            self.last_assistant = v
        self.last = v

    def row(self) -> np.ndarray:
        """The block's row: ``[mean, first_user, last_assistant, last]`` (zeros where none yet)."""
        z = np.zeros(self.dim)
        parts = [self.total / self.n if self.n else z, self.first_user, self.last_assistant, self.last]
        return np.concatenate([z if p is None else p for p in parts])

    def to_dict(self, dtype: str = "<f4") -> dict[str, Any]:
        """JSON-able, the vectors base64 in ``dtype`` (``<f4``: a session's state, scored again to
        1e-6; ``<f2``: half the size, about 2 KB at 256 dimensions — a stored run keeps its step vectors
        instead, :mod:`serve.store.encodings`)."""
        def enc(a: np.ndarray | None) -> str | None:
            return None if a is None else base64.b64encode(np.asarray(a, dtype).tobytes()).decode("ascii")

        return {"n": self.n, "dtype": dtype, "total": enc(self.total), "first_user": enc(self.first_user),
                "last_assistant": enc(self.last_assistant), "last": enc(self.last)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Pool:
        dtype = str(d.get("dtype", "<f4"))
        if dtype not in ("<f2", "<f4"):
            raise ValueError(f"a pool's dtype is <f2 or <f4; got {dtype!r}")

        def dec(s: str | None) -> np.ndarray | None:
            return None if s is None else np.frombuffer(base64.b64decode(s), dtype).astype(np.float64)

        total = dec(d["total"])
        if total is None:
            raise ValueError("a pool needs its total")
        return cls(total, int(d["n"]), dec(d.get("first_user")), dec(d.get("last_assistant")), dec(d.get("last")))


def encode_steps(encoder: StaticEncoder, steps: Sequence[Step]) -> np.ndarray:
    """Each step's vector, rounded to float16 (``len(steps) × dim`` float32; a system step's row is NaN:
    it is not pooled)."""
    texts = [step_text(s) for s in steps]
    idx = [i for i, t in enumerate(texts) if t is not None]
    out = np.full((len(steps), encoder.dim), np.nan, dtype=np.float32)
    if idx:
        out[idx] = encoder.encode([t for t in texts if t is not None]).astype(STORED_DTYPE)
    return out


def unencoded(steps: Sequence[Step], known: np.ndarray | None) -> list[int]:
    """The indices of the steps the encoder reads that have no vector in ``known`` (vectors of the first
    ``len(known)`` steps; a NaN row: none)."""
    return [i for i, s in enumerate(steps)
            if (known is None or i >= len(known) or np.isnan(known[i, 0])) and step_text(s) is not None]


def encode_missing(encoder: StaticEncoder, steps: Sequence[Step], known: np.ndarray | None = None) -> np.ndarray:
    """:func:`encode_steps` of ``steps``, in one batch, but for the rows ``known`` has (vectors encoded
    before, of the first ``len(known)`` steps; NaN rows: none), which are taken as they are."""
    if known is None or not len(known):
        return encode_steps(encoder, steps)
    out = np.full((len(steps), encoder.dim), np.nan, dtype=np.float32)
    out[: min(len(known), len(steps))] = known[: len(steps)]
    todo = unencoded(steps, known)
    if todo:
        out[todo] = encode_steps(encoder, [steps[i] for i in todo])
    return out


def pack(vectors: np.ndarray) -> bytes:
    """Step vectors as stored: float16, little-endian, row after row (NaN rows kept)."""
    return np.ascontiguousarray(vectors, dtype=STORED_DTYPE).tobytes()


def unpack(raw: bytes, dim: int) -> np.ndarray:
    """What :func:`pack` wrote, as ``rows × dim`` float32.

    >>> v = np.array([[0.5, np.nan], [1.0, -2.0]], dtype=np.float32)
    >>> np.array_equal(unpack(pack(v), 2), v, equal_nan=True)
    True
    """
    a = np.frombuffer(raw, dtype=STORED_DTYPE)
    if dim <= 0 or a.size % dim:
        raise ValueError(f"{len(raw)} bytes are not rows of {dim} float16 values")
    return a.reshape(-1, dim).astype(np.float32)


def prefix_rows(vectors: np.ndarray, steps: Sequence[Step], cuts: Sequence[int]) -> np.ndarray:
    """The block's row after each of ``cuts`` steps (ascending or not), from :func:`encode_steps`."""
    dim = vectors.shape[1]
    want = sorted(set(cuts))
    at: dict[int, np.ndarray] = {}
    pool = Pool.empty(dim)
    j = 0
    if want and want[0] == 0:
        at[0] = pool.row()
        j = 1
    for i, step in enumerate(steps, 1):
        if j >= len(want):
            break
        if not np.isnan(vectors[i - 1, 0]):
            pool.add(vectors[i - 1], step.kind)
        while j < len(want) and want[j] == i:
            at[i] = pool.row()
            j += 1
    return np.array([at[c] for c in cuts]).reshape(len(cuts), 4 * dim)


__all__ = ["CALL_CHARS", "STORED_DTYPE", "TEXT_CHARS", "Pool", "encode_missing", "encode_steps", "pack", "prefix_rows", "step_text", "unencoded",
           "unpack"]
