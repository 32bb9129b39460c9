"""A bilingual WordPiece vocabulary for the student, trained with ``tokenizers`` only.

all-MiniLM-L6-v2's English vocabulary maps most Chinese characters to ``[UNK]``; the student gets
its own vocabulary from our training texts: BERT normalisation (lower case, every CJK character its
own token, so Chinese is read character by character), WordPiece over the rest, the BERT special
tokens with ``[PAD]`` = 0, and ``[CLS] … [SEP]`` added around every text.

>>> tok = train_wordpiece(["the weather in Oslo is 12 °C", "今天北京的天气很好"] * 5, vocab_size=200)
>>> tok.encode("天气 Oslo").tokens[:3]
['[CLS]', '天', '气']
>>> tok.token_to_id("[PAD]")
0
>>> tok.encode("the [goal] weather").tokens
['[CLS]', 'the', '[goal]', 'weather', '[SEP]']
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
#: The representation's line markers (``step_text``), kept whole so a model can tell the lines apart.
MARKERS = ("[grounding]", "[prev]", "[goal]")


def train_wordpiece(texts: Iterable[str], *, vocab_size: int = 8000, min_frequency: int = 2,
                    max_length: int | None = None) -> Tokenizer:
    """Train a BERT-style WordPiece tokenizer on ``texts``; returns a ready ``Tokenizer``."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[*SPECIAL_TOKENS, *MARKERS],
        continuing_subword_prefix="##",
    )
    tok.train_from_iterator(texts, trainer=trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    if max_length is not None:
        tok.enable_truncation(max_length=max_length)
    return tok


def unk_rate(tok: Tokenizer, texts: Iterable[str]) -> float:
    """Share of tokens that are ``[UNK]`` over ``texts`` (how much of a language a vocabulary reads)."""
    unk = tok.token_to_id("[UNK]")
    total = hits = 0
    for enc in tok.encode_batch(list(texts)):
        total += len(enc.ids)
        hits += sum(1 for i in enc.ids if i == unk)
    return hits / total if total else 0.0


__all__ = ["MARKERS", "SPECIAL_TOKENS", "train_wordpiece", "unk_rate"]
