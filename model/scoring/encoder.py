"""A static sentence encoder: one vector per token, distilled from the shipped all-MiniLM-L6-v2.

A text's vector is the mean of its tokens' rows (MiniLM's own WordPiece tokenizer, ``[UNK]`` and
special tokens dropped), L2-normalised: numpy, scipy and ``tokenizers`` only (one real step 46 µs at
the median, a run's steps in one batch 0.9 ms: ``bench/encoder.py``), no attention and no model hub.
The table is made once by ``python -m model.training.encoder`` (model2vec's recipe: every token
through the transformer alone, PCA, Zipf weighting; a DVC stage) and shipped in ``model/artifacts/encoder/``:

* ``encoder.json`` — format, dimensions, dtype, source model and licence, and the table's sha256;
* ``tokenizer.json`` — the source model's tokenizer (padding and truncation off);
* ``embeddings.npy`` — the table, ``vocabulary × dim`` (float16 as shipped);
* ``LICENSE`` — the source model's licence (Apache-2.0).

Code that loads it takes a path (:func:`default_path` is the shipped one).

>>> enc = StaticEncoder.load(default_path())              # doctest: +SKIP
>>> enc.encode(["the flight is booked", "航班已预订"]).shape  # doctest: +SKIP
(2, 256)
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.sparse import csr_matrix
from tokenizers import Tokenizer

from model.core.errors import InputError
from model.scoring.wordpiece import WordPieceIds

FORMAT = "static-encoder/1"

#: Tokens read of one text (a long tool result is read from its start; the mean of 512 tokens
#: hardly moves with more, and the cost stays bounded).
MAX_TOKENS = 512


def default_path() -> Path:
    """The shipped encoder's folder (``model/artifacts/encoder``)."""
    return Path(__file__).resolve().parent.parent / "artifacts" / "encoder"


_SHARED: dict[Path, StaticEncoder] = {}


def shared_encoder(path: Path | None = None) -> StaticEncoder:
    """The encoder at ``path`` (default: the shipped one), loaded once per process and shared by every
    agent model that reads it (the table is 15 MB; each model stores only its version)."""
    key = Path(path or default_path()).resolve()
    enc = _SHARED.get(key)
    if enc is None:
        enc = _SHARED[key] = StaticEncoder.load(key)
    return enc


class StaticEncoder:
    """Token table + tokenizer; :meth:`encode` maps texts to unit vectors.

    Parameters
    ----------
    tokenizer:
        A ``tokenizers.Tokenizer`` (its padding and truncation are switched off here).
    embeddings:
        ``vocabulary × dim`` rows, indexed by the tokenizer's ids.
    meta:
        What ``encoder.json`` says besides the table (source, licence, ...).
    """

    def __init__(self, tokenizer: Tokenizer, embeddings: np.ndarray, *, meta: dict[str, Any] | None = None) -> None:
        if embeddings.ndim != 2 or embeddings.shape[0] < tokenizer.get_vocab_size():
            raise InputError(f"embeddings must be vocabulary × dim with a row for each of the tokenizer's "
                             f"{tokenizer.get_vocab_size()} ids; got shape {embeddings.shape}", path="embeddings")
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self.tokenizer = tokenizer
        self.embeddings = embeddings
        self.meta = dict(meta or {})
        vocab = tokenizer.get_vocab()
        specials = [vocab[t] for t in ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]") if t in vocab]
        self._keep = np.ones(embeddings.shape[0], dtype=bool)  # by token id: False for the special tokens
        self._keep[specials] = False
        self._unk = vocab.get("[UNK]")
        self._version: str | None = None
        self._ids = WordPieceIds(tokenizer)

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    @property
    def version(self) -> str:
        """A content hash of the table and the tokenizer (12 hex digits)."""
        if self._version is None:
            h = hashlib.sha256(np.ascontiguousarray(self.embeddings).tobytes())
            h.update(self.tokenizer.to_str().encode("utf-8"))
            self._version = h.hexdigest()[:12]
        return self._version

    def token_ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Each text's token ids (at most :data:`MAX_TOKENS`; special tokens kept): the tokenizer's
        ``encode`` ids at a fraction of its CPU (:class:`model.scoring.wordpiece.WordPieceIds`)."""
        return [np.asarray(ids, dtype=np.int64) for ids in self._ids.batch(texts, MAX_TOKENS)]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``len(texts) × dim`` float32, each row unit length (zeros for a text with no known token)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not len(texts):
            return out
        ids = self.token_ids(texts)
        # In float64 the sum of ≤ 512 float16 rows is exact in any order, so both ways below give a text
        # the same vector, whatever its batch.
        if len(ids) == 1:  # a session append's one step: its rows summed (a sparse product costs more)
            flat = ids[0][self._keep[ids[0]]]
            sums = self.embeddings[flat].astype(np.float64).sum(axis=0, keepdims=True)
        else:
            lengths = np.array([len(i) for i in ids])
            flat = np.concatenate(ids)
            rows = np.repeat(np.arange(len(texts)), lengths)
            kept = self._keep[flat]  # one lookup for every text's tokens (special tokens dropped)
            flat, rows = flat[kept], rows[kept]
            # a text's sum = its token counts × the rows of the tokens the batch uses (a few hundred of
            # the table's 30,522): one sparse product (no BLAS threads), not a gather of every token's row
            uniq, inv = np.unique(flat, return_inverse=True)
            counts = csr_matrix((np.ones(len(flat)), (rows, inv)), shape=(len(texts), len(uniq)))
            sums = np.asarray(counts @ self.embeddings[uniq].astype(np.float64))
        if not len(flat):
            return out
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        out[:] = sums / np.where(norms > 0, norms, 1.0)
        return out

    def unknown_share(self, texts: Sequence[str]) -> float:
        """The share of the texts' tokens the vocabulary does not know (``[UNK]``)."""
        ids = self.token_ids(texts)
        n = sum(len(i) for i in ids)
        return 0.0 if not n or self._unk is None else sum(int((i == self._unk).sum()) for i in ids) / n

    # ---- persistence ------------------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Write ``encoder.json``, ``tokenizer.json`` and ``embeddings.npy`` into the folder ``path``."""
        path.mkdir(parents=True, exist_ok=True)
        np.save(path / "embeddings.npy", self.embeddings, allow_pickle=False)
        self.tokenizer.save(str(path / "tokenizer.json"))
        meta = {**self.meta, "format": FORMAT, "dim": self.dim, "vocabulary": int(self.embeddings.shape[0]),
                "dtype": str(self.embeddings.dtype), "version": self.version,
                "sha256": hashlib.sha256((path / "embeddings.npy").read_bytes()).hexdigest()}
        (path / "encoder.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> StaticEncoder:
        """Read a folder written by :meth:`save`; the table's sha256 is checked.

        Raises
        ------
        InputError
            A file is missing, the format is not this one's, or the table does not match its hash.
        """
        path = Path(path)
        missing = [n for n in ("encoder.json", "tokenizer.json", "embeddings.npy") if not (path / n).is_file()]
        if missing:
            raise InputError(f"no static encoder at {path}: missing {', '.join(missing)} "
                             "(make one with `python -m model.training.encoder`)", path="encoder")
        meta = json.loads((path / "encoder.json").read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT:
            raise InputError(f"{path / 'encoder.json'}: format {meta.get('format')!r}, expected {FORMAT!r}",
                             path="encoder")
        raw = (path / "embeddings.npy").read_bytes()
        if hashlib.sha256(raw).hexdigest() != meta.get("sha256"):
            raise InputError(f"{path / 'embeddings.npy'} does not match the sha256 in encoder.json", path="encoder")
        emb = np.load(io.BytesIO(raw), allow_pickle=False)  # the bytes just checked, not a second read
        return cls(Tokenizer.from_file(str(path / "tokenizer.json")), emb, meta=meta)


__all__ = ["FORMAT", "MAX_TOKENS", "StaticEncoder", "default_path", "shared_encoder"]
