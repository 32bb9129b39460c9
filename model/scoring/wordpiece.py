"""BERT WordPiece token ids at a fraction of the ``tokenizers`` package's CPU, the same ids.

The static encoder (:mod:`model.scoring.encoder`) and the step classifier
(:mod:`model.scoring.classifier.runtime`) read every step through a BERT tokenizer (lower-casing
``BertNormalizer``, ``BertPreTokenizer``, WordPiece). For the texts agents write that tokenizer spends
most of its time splitting words and building its ``Encoding`` objects, not in WordPiece itself.
:class:`WordPieceIds` gives the same ids (no special tokens added) another way:

- the added tokens (``[CLS]``, ``[SEP]``, the classifier's ``[prev]``, ``[goal]``, ``[grounding]``)
  are cut out of the raw text first, as the tokenizer does (each must match as written: not
  normalised, no ``lstrip``/``rstrip``/``single_word``), and stand for their ids;
- ASCII runs are split by BERT's pre-tokenizer rule for ASCII (runs of letters and digits, each
  punctuation mark alone) and each word's WordPiece ids come from a word cache (the tokenizer's own
  WordPiece on a miss);
- a whitespace-delimited chunk with other characters is read by the tokenizer alone (and cached too:
  the tokenizer never joins across whitespace);
- text with an ASCII control character goes to the tokenizer whole (the normaliser drops those).

It stops once it holds ``limit`` ids: the first ``limit`` ids are the tokenizer's first ``limit``
(``tests/test_wordpiece.py`` checks real steps, the classifier's texts and the edges).
A tokenizer of another kind is read by the tokenizer for every text (:attr:`WordPieceIds.plain`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from itertools import chain

from tokenizers import Tokenizer

#: What BERT's pre-tokenizer makes of plain ASCII text (after lower-casing): runs of letters and digits,
#: and each punctuation mark alone (every printable ASCII character is one or the other).
_ASCII_WORD = re.compile(r"[a-z0-9]+|[!-/:-@\[-`{-~]")
#: ASCII control characters the normaliser drops (text with them takes the tokenizer's own path).
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
#: The characters the normaliser keeps as whitespace (Rust's ``char::is_whitespace`` less the control
#: characters it drops): the tokenizer never joins what they separate.
_WHITESPACE = " \t\n\r\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
#: A whitespace-delimited chunk with a character outside ASCII (the tokenizer reads it alone).
_WIDE_CHUNK = re.compile(f"[^{_WHITESPACE}]*[^\\x00-\\x7f{_WHITESPACE}][^{_WHITESPACE}]*")
#: Words whose WordPiece ids are remembered, cleared when full (all 82,643 steps of the seven real sets
#: hold 41,032 distinct words; a few MB).
WORD_CACHE = 50_000
#: Pieces (the text between two added tokens, or a whole text without one) whose ids are remembered,
#: cleared when full: the classifier's text of a step repeats the lines of the steps before it
#: (``[prev] …``, ``[goal] …``), so about half the pieces of a trace's texts were read before. Only a
#: piece of at most :data:`PIECE_CHARS` characters read whole (not cut at the limit) is kept.
PIECE_CACHE = 4096
PIECE_CHARS = 2048


class WordPieceIds:
    """The token ids of texts as ``tokenizer.encode(text, add_special_tokens=False)`` gives them.

    Parameters
    ----------
    tokenizer:
        A ``tokenizers.Tokenizer``; a copy with padding and truncation off is kept (the caller's
        settings are its own).
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        config = json.loads(self.tokenizer.to_str())
        added = config.get("added_tokens") or []
        #: Whether the fast path applies to this tokenizer at all (else every text is the tokenizer's).
        self.plain = _plain_bert(config)
        self._added = {str(t["content"]): int(t["id"]) for t in added}
        longest_first = sorted(self._added, key=len, reverse=True)
        self._added_re = re.compile("|".join(map(re.escape, longest_first))) if self._added else None
        self._words: dict[str, tuple[int, ...]] = {}
        self._pieces: dict[str, tuple[int, ...]] = {}

    def ids(self, text: str, limit: int) -> list[int]:
        """The first ``limit`` ids of ``text``."""
        fast = self.fast_ids(text, limit) if self.plain else None
        if fast is None:
            return list(self.tokenizer.encode(text, add_special_tokens=False).ids[:limit])
        return fast

    def batch(self, texts: Sequence[str], limit: int) -> list[list[int]]:
        """:meth:`ids` of each text; the texts the fast path leaves go to the tokenizer in one batch."""
        out = [self.fast_ids(t, limit) if self.plain else None for t in texts]
        rest = [i for i, o in enumerate(out) if o is None]
        if rest:
            # encode_batch_fast (tokenizers >= 0.21): the same ids without the character offsets (-20 %)
            encode = getattr(self.tokenizer, "encode_batch_fast", None) or self.tokenizer.encode_batch
            for i, e in zip(rest, encode([texts[i] for i in rest], add_special_tokens=False), strict=True):
                out[i] = list(e.ids[:limit])
        return [o if o is not None else [] for o in out]

    def fast_ids(self, text: str, limit: int) -> list[int] | None:
        """:meth:`ids` without the tokenizer's whole-text path (``None``: the tokenizer must read it whole)."""
        if _ASCII_CONTROL.search(text):
            return None
        if len(self._words) > WORD_CACHE:
            self._words.clear()
        if len(self._pieces) > PIECE_CACHE:
            self._pieces.clear()
        ids: list[int] = []
        if self._added_re is None or "[" not in text:
            self._cached_piece(text, ids, limit)
        else:
            at = 0
            for m in self._added_re.finditer(text):
                self._cached_piece(text[at:m.start()], ids, limit)
                if len(ids) >= limit:
                    break
                ids.append(self._added[m.group()])
                at = m.end()
            else:
                self._cached_piece(text[at:], ids, limit)
        return ids[:limit]

    def _cached_piece(self, text: str, ids: list[int], limit: int) -> None:
        """:meth:`_piece`, through the piece cache (a piece's ids do not depend on what is around it)."""
        hit = self._pieces.get(text)
        if hit is not None:
            ids.extend(hit)
            return
        need = limit - len(ids)
        if need <= 0:
            return
        own: list[int] = []
        self._piece(text, own, need)
        if len(own) < need and len(text) <= PIECE_CHARS:  # read whole, not cut at the limit
            self._pieces[text] = tuple(own)
        ids.extend(own)

    def _piece(self, text: str, ids: list[int], limit: int) -> None:
        """Append the ids of ``text`` (no added token in it) to ``ids``, up to ``limit``."""
        if text.isascii():
            self._ascii_words(text, ids, limit)
            return
        words = self._words
        at = 0
        for m in _WIDE_CHUNK.finditer(text):
            self._ascii_words(text[at:m.start()], ids, limit)
            if len(ids) >= limit:
                return
            chunk = m.group()
            hit = words.get(chunk)
            if hit is None:
                hit = words[chunk] = tuple(self.tokenizer.encode(chunk, add_special_tokens=False).ids)
            ids.extend(hit)
            at = m.end()
        self._ascii_words(text[at:], ids, limit)

    def _ascii_words(self, text: str, ids: list[int], limit: int) -> None:
        """Append the ids of ``text`` (ASCII, but for whitespace) to ``ids``, up to ``limit`` (or past it:
        the caller keeps the first ``limit``)."""
        need = limit - len(ids)
        if need <= 0:
            return
        words = _ASCII_WORD.findall(text.lower())
        if len(words) > need:  # WordPiece gives every word one id at least ([UNK] when nothing else)
            del words[need:]
        cache = self._words
        hits = list(map(cache.get, words))
        if None in hits:
            tokenize = self.tokenizer.model.tokenize
            for k, w in enumerate(words):
                if hits[k] is None:
                    hits[k] = cache[w] = tuple(t.id for t in tokenize(w))
        ids.extend(chain.from_iterable(hits))  # type: ignore[arg-type]


def _plain_bert(config: dict[str, object]) -> bool:
    """Whether a tokenizer (its ``to_str()`` JSON) is the one the fast path reproduces: BERT's
    lower-casing normaliser and pre-tokenizer, WordPiece, and added tokens matched as written."""
    norm, pre, model = (config.get(k) or {} for k in ("normalizer", "pre_tokenizer", "model"))
    added = config.get("added_tokens") or []
    if not (isinstance(norm, dict) and isinstance(pre, dict) and isinstance(model, dict) and isinstance(added, list)):
        return False
    return (norm.get("type") == "BertNormalizer" and norm.get("lowercase") is True and norm.get("clean_text") is True
            and pre.get("type") == "BertPreTokenizer" and model.get("type") == "WordPiece"
            and all(t.get("content") and not (t.get("normalized") or t.get("lstrip") or t.get("rstrip")
                                              or t.get("single_word")) for t in added))


__all__ = ["PIECE_CACHE", "PIECE_CHARS", "WORD_CACHE", "WordPieceIds"]
