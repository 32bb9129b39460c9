"""Serving the classifier: onnxruntime + ``tokenizers`` + NumPy, nothing else (no torch).

An artefact folder holds ``classifier.onnx`` and ``tokenizer.json``. The ONNX file's metadata
carries everything needed to turn a trace into scores exactly as training did: the label order,
the per-label thresholds, the temperature, the input-representation settings, the tokenizer's
``max_length`` and the model version (:data:`META_KEYS`).

>>> from model.scoring.classifier.runtime import ClassifierRuntime
>>> rt = ClassifierRuntime.load("model/artifacts")          # doctest: +SKIP
>>> rt.score_step(trace, len(trace.steps) - 1).shape        # doctest: +SKIP
(16,)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from model.core.errors import InputError, ModelLoadError
from model.core.metrics import sigmoid
from model.core.schema import Trace
from model.scoring.classifier.representation import RepresentationConfig, step_text, trace_texts
from model.scoring.wordpiece import WordPieceIds

#: onnxruntime intra-op threads by default (the service's ``TRIAGE_ORT_THREADS``): at a request's batch sizes a
#: second thread costs more CPU than it saves wall time (docs/benchmarks.md).
DEFAULT_THREADS = 1
MODEL_FILE = "classifier.onnx"
TOKENIZER_FILE = "tokenizer.json"
#: The namespace of our keys in the ONNX file's metadata: the exporter
#: (:mod:`model.training.classifier.export`) writes ``META_PREFIX + key`` for every key of :data:`META_KEYS`
#: (and may add others under the prefix); :meth:`ArtefactMeta.from_map` requires them all and keeps the
#: keys outside the prefix as ``extra``.
META_PREFIX = "triage."
#: The metadata every artefact must carry (each under :data:`META_PREFIX`).
META_KEYS = (
    "labels",
    "thresholds",
    "temperature",
    "representation",
    "tokenizer",
    "model_version",
    "model_name",
)


@dataclass(frozen=True)
class ArtefactMeta:
    """What the ONNX metadata says about the model."""

    labels: tuple[str, ...]
    thresholds: np.ndarray
    temperature: float
    representation: RepresentationConfig
    max_length: int
    model_version: str
    model_name: str
    extra: dict[str, str]

    @classmethod
    def from_map(cls, meta: dict[str, str], where: str) -> ArtefactMeta:
        missing = [k for k in META_KEYS if META_PREFIX + k not in meta]
        if missing:
            raise ModelLoadError(f"{where}: ONNX metadata lacks {[META_PREFIX + k for k in missing]}")
        try:
            labels = tuple(json.loads(meta[META_PREFIX + "labels"]))
            thresholds = np.asarray(json.loads(meta[META_PREFIX + "thresholds"]), dtype=np.float32)
            temperature = float(meta[META_PREFIX + "temperature"])
            rep = RepresentationConfig.from_dict(json.loads(meta[META_PREFIX + "representation"]))
            tok = json.loads(meta[META_PREFIX + "tokenizer"])
            max_length = int(tok["max_length"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelLoadError(f"{where}: unreadable ONNX metadata: {exc}") from exc
        if len(thresholds) != len(labels):
            raise ModelLoadError(f"{where}: {len(labels)} labels but {len(thresholds)} thresholds")
        extra = {k: v for k, v in meta.items() if not k.startswith(META_PREFIX)}
        return cls(
            labels=labels,
            thresholds=thresholds,
            temperature=temperature,
            representation=rep,
            max_length=max_length,
            model_version=meta[META_PREFIX + "model_version"],
            model_name=meta[META_PREFIX + "model_name"],
            extra=extra,
        )


class ClassifierRuntime:
    """An exported classifier loaded for inference.

    Parameters
    ----------
    model_path:
        The ``.onnx`` file.
    tokenizer_path:
        The ``tokenizer.json`` beside it.
    threads:
        onnxruntime intra-op threads (:data:`DEFAULT_THREADS`).
    """

    def __init__(self, model_path: Path, tokenizer_path: Path, *, threads: int = DEFAULT_THREADS) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.model_path = Path(model_path)
        self.tokenizer_path = Path(tokenizer_path)
        for p in (self.model_path, self.tokenizer_path):
            if not p.is_file():
                raise ModelLoadError(f"classifier artefact missing: {p}")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        # No spin-waiting between forwards: a step's forward is ~0.4 ms, and with spinning on the
        # second thread burnt ~3.4 ms of CPU after each one (0.6 ms without; docs/benchmarks.md),
        # CPU the service's other requests need on a 2-core machine.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # No QDQ graph transformations: the model's weights are dequantized after their Gather, and
        # the QDQ pass gave each DequantizeLinear with two consumers a duplicate (16 of them, not 8),
        # so each net's embedding rows were dequantized twice a forward. Without it the graph keeps 8
        # and a 10-step forward costs ~8 % less CPU, with the same output bits
        # (bench/model_digests.py; docs/benchmarks.md, "Diagnosis path, round 5").
        opts.add_session_config_entry("session.disable_quant_qdq", "1")
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self.session = ort.InferenceSession(
                str(self.model_path), sess_options=opts, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
            raise ModelLoadError(f"cannot load {self.model_path}: {exc}") from exc
        self.meta = ArtefactMeta.from_map(
            dict(self.session.get_modelmeta().custom_metadata_map), str(self.model_path)
        )
        try:
            self.tokenizer = Tokenizer.from_file(str(self.tokenizer_path))
        except Exception as exc:  # tokenizers raises a bare Exception on a bad file
            raise ModelLoadError(f"cannot load {self.tokenizer_path}: {exc}") from exc
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.meta.max_length)
        self.input_names = tuple(i.name for i in self.session.get_inputs())
        self.labels = self.meta.labels
        self.thresholds = self.meta.thresholds
        pad = self.tokenizer.token_to_id("[PAD]")
        self._pad_id = 0 if pad is None else int(pad)
        self._ids = WordPieceIds(self.tokenizer)
        self._frame = _frame(json.loads(self.tokenizer.to_str()))

    @classmethod
    def load(cls, directory: str | Path, *, model_file: str = MODEL_FILE, threads: int = DEFAULT_THREADS) -> ClassifierRuntime:
        """Load ``directory/model_file`` and ``directory/tokenizer.json``."""
        d = Path(directory)
        return cls(d / model_file, d / TOKENIZER_FILE, threads=threads)

    # -- the raw path: tokenize + forward ----------------------------------------------------

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """Each text's ids as the tokenizer gives them (special tokens added, truncated at ``max_length``),
        read by :class:`~model.scoring.wordpiece.WordPieceIds` when the tokenizer frames a text with
        special tokens only (the ids between are then the first ``max_length`` less the frame's)."""
        if self._frame is None:
            return [list(e.ids) for e in self.tokenizer.encode_batch(texts)]
        head, tail = self._frame
        return [head + ids + tail for ids in self._ids.batch(texts, self.meta.max_length - len(head) - len(tail))]

    def encode(self, texts: list[str]) -> dict[str, np.ndarray]:
        """Token ids, attention mask and token types, padded to the longest text."""
        rows = self.token_ids(texts)
        width = max(len(r) for r in rows)
        ids = np.full((len(rows), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for r, row in enumerate(rows):
            ids[r, : len(row)] = row
            mask[r, : len(row)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        return {k: v for k, v in feeds.items() if k in self.input_names}

    def forward(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        out = self.session.run(["logits"], feeds)[0]
        return np.asarray(out, dtype=np.float32)

    def logits(self, texts: list[str], *, batch_size: int = 16) -> np.ndarray:
        """Raw logits ``(len(texts), len(labels))``; batches grouped by length to pad little."""
        if not texts:
            return np.zeros((0, len(self.labels)), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), len(self.labels)), dtype=np.float32)
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            out[idx] = self.forward(self.encode([texts[i] for i in idx]))
        return out

    # -- our path: representation, calibration -----------------------------------------------

    def predict_proba(self, texts: list[str], *, batch_size: int = 16) -> np.ndarray:
        """Calibrated probabilities ``sigmoid(logits / T)`` per label."""
        return sigmoid(self.logits(texts, batch_size=batch_size) / self.meta.temperature)

    def score_step(self, trace: Trace, index: int) -> np.ndarray:
        """Probabilities for one step (the real-time path: only the new step is encoded)."""
        text = step_text(trace, index, self.meta.representation)
        feeds = self.encode([text])
        return sigmoid(self.forward(feeds)[0] / self.meta.temperature)

    def score_trace(self, trace: Trace, *, start: int = 0) -> np.ndarray:
        """Probabilities ``(len(steps) - start, len(labels))`` for the steps from ``start`` on."""
        if start < 0 or start > len(trace.steps):
            raise InputError(f"start {start} is outside a trace of {len(trace.steps)} steps", path="start")
        texts = trace_texts(trace, self.meta.representation, start=start)
        return self.predict_proba(texts)

    def token_count(self, text: str) -> int:
        return len(self.token_ids([text])[0])

    def describe(self) -> dict[str, Any]:
        return {
            "model_name": self.meta.model_name,
            "model_version": self.meta.model_version,
            "labels": list(self.labels),
            "max_length": self.meta.max_length,
            "representation": self.meta.representation.to_dict(),
            "path": str(self.model_path),
        }


def _frame(config: dict[str, Any]) -> tuple[list[int], list[int]] | None:
    """The ids a tokenizer (its ``to_str()`` JSON) puts before and after a single text: its
    ``TemplateProcessing`` of special tokens around ``$A`` (``None``: another post-processor)."""
    post = config.get("post_processor") or {}
    if post.get("type") != "TemplateProcessing":
        return None
    head: list[int] = []
    tail: list[int] = []
    seen = False
    for piece in post.get("single") or []:
        if "Sequence" in piece:
            if seen or piece["Sequence"].get("id") != "A":
                return None
            seen = True
        elif "SpecialToken" in piece:
            token = post.get("special_tokens", {}).get(piece["SpecialToken"].get("id"), {})
            (tail if seen else head).extend(int(i) for i in token.get("ids", []))
        else:
            return None
    return (head, tail) if seen else None


__all__ = ["DEFAULT_THREADS", "META_KEYS", "META_PREFIX", "MODEL_FILE", "TOKENIZER_FILE", "ArtefactMeta", "ClassifierRuntime"]
