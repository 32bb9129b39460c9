"""A trained torch classifier on disk and in use: its tokenizer, its folder, its logits.

Shared by the training stages (:mod:`~model.training.classifier.train`,
:mod:`~model.training.classifier.distill`), the trace-level re-calibration
(:mod:`~model.training.classifier.calibrate`) and the export; torch and transformers are imported
only when called.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def load_tokenizer(path: Path, max_length: int) -> Any:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.enable_truncation(max_length=max_length)
    return tok


def save_tokenizer(tok: Any, path: Path, max_length: int) -> None:
    """Write ``tokenizer.json`` with truncation at ``max_length`` and no fixed padding."""
    tok.no_padding()
    tok.enable_truncation(max_length=max_length)
    tok.save(str(path))


def encode(tok: Any, texts: Sequence[str]) -> dict[str, Any]:
    import torch

    encs = tok.encode_batch(list(texts))
    width = max(len(e.ids) for e in encs)
    pad = tok.token_to_id("[PAD]") or 0
    ids = torch.full((len(encs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(encs), width), dtype=torch.long)
    for r, e in enumerate(encs):
        ids[r, : len(e.ids)] = torch.tensor(e.ids, dtype=torch.long)
        mask[r, : len(e.ids)] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def predict_logits(model: Any, tok: Any, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
    """Logits of a torch classifier over ``texts`` (eval mode, no grad, length-sorted batches)."""
    import torch

    model.eval()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.zeros((len(texts), model.config.num_labels), dtype=np.float32)
    with torch.inference_mode():
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            logits = model(**encode(tok, [texts[i] for i in idx])).logits
            out[idx] = logits.float().numpy()
    return out


def load_classifier(path: Path) -> Any:
    """A trained classifier folder (BERT, MiniLM or the n-gram student) with eager attention."""
    from transformers import AutoModelForSequenceClassification

    from model.training.classifier import ngram  # noqa: F401  (registers the n-gram student with the Auto classes)

    return AutoModelForSequenceClassification.from_pretrained(path, attn_implementation="eager")


__all__ = ["encode", "load_classifier", "load_tokenizer", "predict_logits", "save_tokenizer"]
