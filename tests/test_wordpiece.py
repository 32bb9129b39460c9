"""model/scoring/wordpiece.py: the same token ids as the ``tokenizers`` package, for both shipped
tokenizers (the static encoder's MiniLM, the step classifier's), on real steps and on the edges; and the
classifier's scores on real runs unchanged by it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from model.core.metrics import sigmoid
from model.data.realdata import first_groups, load_source
from model.scoring.classifier.representation import trace_texts
from model.scoring.classifier.runtime import ClassifierRuntime
from model.scoring.encoder import default_path
from model.scoring.wordpiece import WordPieceIds

ARTIFACTS = Path(__file__).resolve().parent.parent / "model" / "artifacts"
needs_classifier = pytest.mark.skipif(not (ARTIFACTS / "classifier.onnx").is_file(), reason="no shipped classifier")

#: Control characters, added tokens' text (as written, in other case, glued to words), words over WordPiece's
#: 100 characters, accents, CJK, Unicode spaces and format characters, long texts.
EDGES = ["", "   ", "a\tb\nc\rd", "x\x0bz\x0cw", "zero\x00byte", "del\x7fete", "say [CLS] and [cls]",
         "[MASK]ed [UNK]", "a [SEP] b", "[prev] user_input : hi\n[goal] hi [grounding]", "x[goal]y[prev][prev]z",
         "[Prev] [GOAL] [grounding", "w" * 101 + " ok", "don't_stop-me.now!!! {a:1} ~`^|\\", "café naïve",
         "航班 booked", "CamelCaseWordsAndNumbers123abc 3.14159", "call get_user_details: {\"user_id\": \"mia_li_3668\"}",
         "word " * 700, "İstanbul ΣΊΣΥΦΟΣ naïve\u00a0x\u3000y", "a\u200bb zero\ufeffwidth", "«quoted» — dash…",
         "👍ok e\u0301 ﬁne Ⅻ ½", "中文abc混合 text[prev]中", "line\u2028sep\u2029para\u0085nel", "tab\t\u1680ogham",
         "x" * 98 + "é", "é" + "y" * 600, "[goal] " + "中" * 400, "tab\x0bbed [prev] x"]


def _real_texts(limit_groups: int) -> list[str]:
    """Real steps' contents and the classifier's texts of them, from the first task groups of four sets."""
    out: list[str] = []
    for source in ("tau_airline", "agentprocessbench", "swe", "whowhen"):
        for run in first_groups(load_source(source), limit_groups):
            out += [s.content for s in run.trace.steps] + trace_texts(run.trace)
    return out


@pytest.fixture(scope="module")
def real_texts() -> list[str]:
    return _real_texts(2)


@pytest.mark.parametrize("path", [default_path() / "tokenizer.json", ARTIFACTS / "tokenizer.json"],
                         ids=["encoder", "classifier"])
@pytest.mark.parametrize("limit", [512, 254, 7])
def test_the_ids_are_the_tokenizers(path: Path, limit: int, real_texts: list[str]) -> None:
    if not path.is_file():
        pytest.skip(f"no {path}")
    tok = Tokenizer.from_file(str(path))
    tok.no_truncation()
    wp = WordPieceIds(tok)
    assert wp.plain
    texts = real_texts + EDGES
    want = [list(e.ids[:limit]) for e in tok.encode_batch(texts, add_special_tokens=False)]
    assert wp.batch(texts, limit) == want
    assert [wp.ids(t, limit) for t in EDGES] == want[len(real_texts):]
    # the fast path took the added tokens and the non-ASCII chunks; only control characters left it whole
    assert wp.fast_ids("a [SEP] b", limit) is not None and wp.fast_ids("café au lait", limit) is not None
    assert wp.fast_ids("tab\x0bbed", limit) is None and wp.fast_ids("zero\x00byte", limit) is None


def test_a_tokenizer_of_another_kind_is_read_by_the_tokenizer_itself() -> None:
    tok = Tokenizer.from_file(str(ARTIFACTS / "tokenizer.json"))
    plain = tok.to_str()
    tok.normalizer = None  # type: ignore[assignment]  # no lower-casing: the fast path would differ
    wp = WordPieceIds(tok)
    assert not wp.plain and tok.to_str() != plain
    assert wp.batch(["Hello [prev] World"], 50) == [tok.encode("Hello [prev] World", add_special_tokens=False).ids]


@pytest.fixture(scope="module")
def runtime() -> ClassifierRuntime:
    return ClassifierRuntime.load(ARTIFACTS, threads=1)


def _scores_by_the_tokenizer(rt: ClassifierRuntime, texts: list[str]) -> np.ndarray:
    """What ``score_trace`` computed before the fast path: the same batches, the tokenizer's own encodings."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.zeros((len(texts), len(rt.labels)), dtype=np.float32)
    for s in range(0, len(order), 16):
        idx = order[s : s + 16]
        encs = rt.tokenizer.encode_batch([texts[i] for i in idx])
        width = max(len(e.ids) for e in encs)
        ids = np.zeros((len(idx), width), dtype=np.int64)
        mask = np.zeros((len(idx), width), dtype=np.int64)
        for r, e in enumerate(encs):
            ids[r, : len(e.ids)] = e.ids
            mask[r, : len(e.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        out[idx] = rt.forward({k: v for k, v in feeds.items() if k in rt.input_names})
    return np.asarray(sigmoid(out / rt.meta.temperature))


@needs_classifier
def test_classifier_ids_and_scores_on_real_runs_are_unchanged(runtime: ClassifierRuntime, real_texts: list[str]) -> None:
    texts = real_texts + EDGES
    assert runtime.token_ids(texts) == [e.ids for e in runtime.tokenizer.encode_batch(texts)]
    assert runtime.token_count("word " * 700) == runtime.meta.max_length
    runs = [r for source in ("tau_airline", "swe", "whowhen") for r in first_groups(load_source(source), 1)]
    assert len(runs) >= 3
    for run in runs:
        texts = trace_texts(run.trace, runtime.meta.representation)
        assert np.array_equal(runtime.score_trace(run.trace), _scores_by_the_tokenizer(runtime, texts)), run.run_id
        last = len(run.trace.steps) - 1
        assert np.array_equal(runtime.score_step(run.trace, last), _scores_by_the_tokenizer(runtime, texts[-1:])[0])


def test_the_piece_cache_keeps_only_pieces_read_whole() -> None:
    """A piece first met cut at a small limit is not remembered cut: the same text at a larger limit,
    and again from the cache, gives the tokenizer's ids (issue 35's piece cache)."""
    tok = Tokenizer.from_file(str(ARTIFACTS / "tokenizer.json"))
    tok.no_truncation()
    wp = WordPieceIds(tok)
    text = "[prev] tool_result search : " + "heat pumps figure 709 " * 30 + "\n[goal] What's the weather in Kyoto?"
    want = tok.encode(text, add_special_tokens=False).ids
    assert wp.ids(text, 5) == want[:5]
    assert wp.ids(text, 512) == want[:512] == wp.ids(text, 512)  # the second read comes from the cache
    assert wp.ids(text, 40) == want[:40]
    assert all(len(v) < 512 for v in wp._pieces.values())
