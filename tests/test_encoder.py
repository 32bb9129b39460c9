"""The static encoder (model/scoring/encoder.py), its distillation (model/training/encoder.py) and the
agent model's encoder block (model/scoring/agentmodel/encoded.py).

The distillation test runs the real recipe on the shipped MiniLM over the first ids of its
vocabulary (a full distillation is the DVC stage's, ~30 s); the block's tests use the shipped table.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from model.core.errors import InputError
from model.core.schema import Step, StepKind, Trace
from model.scoring.agentmodel.encoded import Pool, encode_steps, prefix_rows, step_text
from model.scoring.agentmodel.features import FeatureCache, prefix_lengths
from model.scoring.agentmodel.model import AgentModel, AgentModelConfig
from model.scoring.encoder import StaticEncoder, default_path, shared_encoder
from tests.test_agentmodel import make_run


@pytest.fixture(scope="module")
def shipped() -> StaticEncoder:
    return shared_encoder()


def test_the_shipped_encoder_loads_checks_its_hash_and_says_what_it_is(shipped: StaticEncoder) -> None:
    meta = json.loads((default_path() / "encoder.json").read_text())
    assert shipped.version == meta["version"] and shipped.dim == meta["dim"] == 256
    assert shipped.embeddings.dtype == np.float16 and meta["licence"] == "Apache-2.0"
    assert (default_path() / "LICENSE").read_text().startswith(("Apache License", "\n", " "))
    v = shipped.encode(["the flight to Oslo is booked", "今天天气很好", "", "航班已预订"])
    assert v.dtype == np.float32 and v.shape == (4, 256)
    assert np.allclose(np.linalg.norm(v[:2], axis=1), 1.0, atol=1e-5)
    assert not v[2].any() and not v[3].any()  # nothing known: zeros, not NaN
    assert not shipped.encode(["", "航班"]).any() and shipped.encode(["[CLS]", "x"]).any(axis=1).tolist() == [False, True]


def test_encoding_a_batch_equals_encoding_each_text(shipped: StaticEncoder) -> None:
    texts = ["refund my ticket please", "the tool returned an error: timeout", "好的，我来查一下", "ok"]
    batch = shipped.encode(texts)
    for i, t in enumerate(texts):
        assert np.array_equal(shipped.encode([t])[0], batch[i])


def test_similar_texts_are_nearer_than_unrelated_ones(shipped: StaticEncoder) -> None:
    a, b, c = shipped.encode(["I cannot find that flight", "no such flight was found",
                              "the weather in Paris is sunny"])
    assert a @ b > a @ c + 0.1


def test_a_tampered_or_missing_table_is_refused(tmp_path: Path, shipped: StaticEncoder) -> None:
    small = StaticEncoder(shipped.tokenizer, shipped.embeddings[:, :8].copy(), meta={"licence": "Apache-2.0"})
    small.save(tmp_path / "enc")
    again = StaticEncoder.load(tmp_path / "enc")
    assert again.version == small.version and np.array_equal(again.encode(["hi there"]), small.encode(["hi there"]))
    emb = np.load(tmp_path / "enc" / "embeddings.npy")
    emb[5, 0] += 1
    np.save(tmp_path / "enc" / "embeddings.npy", emb)
    with pytest.raises(InputError, match="sha256"):
        StaticEncoder.load(tmp_path / "enc")
    (tmp_path / "enc" / "tokenizer.json").unlink()
    with pytest.raises(InputError, match="missing tokenizer.json"):
        StaticEncoder.load(tmp_path / "enc")


def test_chinese_is_read_character_by_character_and_unknown_characters_are_counted(shipped: StaticEncoder) -> None:
    assert shipped.unknown_share(["the flight is booked"]) == 0.0
    # MiniLM's (uncased BERT) vocabulary holds common CJK characters only: "flight booked" is all unknown
    assert len(shipped.token_ids(["航班已预订"])[0]) == 5 and shipped.unknown_share(["航班已预订"]) == 1.0
    assert 0.0 < shipped.unknown_share(["今天天气很好"]) < 1.0


def test_the_distillation_recipe_is_deterministic_and_its_vectors_mean_something(tmp_path: Path) -> None:
    from model.training.encoder import EncoderConfig, distill

    cfg = EncoderConfig(dims=16, limit=3000, dtype="float32")
    a, b = distill(cfg), distill(cfg)
    assert np.array_equal(a.embeddings, b.embeddings) and a.dim == 16
    assert not a.embeddings[0].any()  # [PAD]
    assert not a.embeddings[3000:].any()  # past the limit
    with pytest.raises(InputError, match="dtype"):
        EncoderConfig(dtype="int8")


def test_step_text_skips_the_system_prompt_and_names_calls() -> None:
    assert step_text(Step(kind=StepKind.SYSTEM, content="policy")) is None
    assert step_text(Step(kind=StepKind.TOOL_CALL, tool_name="search", content='{"q": "x"}')) == 'call search: {"q": "x"}'
    assert step_text(Step(kind=StepKind.TOOL_RESULT, tool_name="search", content="3 hits")) == "result search: 3 hits"


def test_prefix_rows_equal_a_pool_fed_step_by_step(shipped: StaticEncoder) -> None:
    t = make_run(1, 0, True, random.Random(3))
    vec = encode_steps(shipped, t.steps)
    cuts = prefix_lengths(len(t.steps), (0.25, 0.5, 1.0))
    rows = prefix_rows(vec, t.steps, cuts)
    pool = Pool.empty(shipped.dim)
    for i, s in enumerate(t.steps, 1):
        text = step_text(s)
        if text is not None:
            fresh = shipped.encode([text])[0]
            # a step's vector is float16 wherever it is kept (stored = served)
            assert np.array_equal(vec[i - 1], fresh.astype(np.float16).astype(np.float32))
            pool.add(vec[i - 1], s.kind)
        else:
            assert np.isnan(vec[i - 1]).all()
        if i in cuts:
            assert np.allclose(pool.row(), rows[cuts.index(i)], atol=1e-7)
    again = Pool.from_dict(pool.to_dict())
    assert np.allclose(again.row(), pool.row(), atol=1e-6)
    half = Pool.from_dict(pool.to_dict("<f2"))
    assert np.allclose(half.row(), pool.row(), atol=2e-3) and pool.to_dict("<f2")["dtype"] == "<f2"


@pytest.fixture(scope="module")
def runs() -> tuple[list[Trace], list[bool], list[str]]:
    rng = random.Random(11)
    traces, failed, groups = [], [], []
    for task in range(30):
        for trial in range(3):
            f = rng.random() < 0.2 + 0.6 * (task % 2)
            traces.append(make_run(task, trial, f, rng))
            failed.append(f)
            groups.append(f"task{task}")
    return traces, failed, groups


CFG = AgentModelConfig(buckets=1 << 12, internal_folds=3, encoder_weight=1.0)


@pytest.fixture(scope="module")
def model(runs) -> AgentModel:
    traces, failed, groups = runs
    return AgentModel.fit(traces[:75], failed[:75], groups[:75], config=CFG)


def test_the_encoder_block_alone_learns_the_planted_signal(runs) -> None:
    from model.core.metrics import auroc

    traces, failed, groups = runs
    only = AgentModelConfig(buckets=1 << 12, internal_folds=0, shape_weight=0.0, ngram_weight=0.0, encoder_weight=1.0)
    m = AgentModel.fit(traces[:75], failed[:75], groups[:75], config=only)
    assert m.fitted_ is not None and m.fitted_.w_emb is not None and not len(m.fitted_.buckets)
    assert auroc(np.array(failed[75:]), np.array([m.score(t) for t in traces[75:]])) > 0.8


def test_prefix_state_rows_and_whole_run_scores_agree(model: AgentModel, runs) -> None:
    traces = runs[0]
    for t in traces[75:80]:
        st = model.start()
        for s in t.steps:
            st.add(s)
        assert model.score_state(st) == pytest.approx(model.score(t), abs=1e-9)
        rows = FeatureCache().rows(t, CFG.buckets, CFG.prefix_fractions, CFG.last_turn, encoded=True)
        assert model.score_rows(rows)[-1] == pytest.approx(model.score(t), abs=1e-6)
        # a session's state, continued by another worker
        half = model.start()
        for s in t.steps[:4]:
            half.add(s)
        cont = model.state_from_dict(json.loads(json.dumps(half.to_dict())))
        for s in t.steps[4:]:
            cont.add(s)
        assert model.score_state(cont) == pytest.approx(model.score(t), abs=1e-6)


def test_the_artefact_keeps_the_block_and_names_its_encoder(model: AgentModel, runs, tmp_path: Path,
                                                            shipped: StaticEncoder) -> None:
    model.save(tmp_path / "m.json")
    d = json.loads((tmp_path / "m.json").read_text())
    assert d["encoder"] == shipped.version and "w_emb" in d
    back = AgentModel.load(tmp_path / "m.json")
    assert back.version == model.version
    for t in runs[0][75:]:
        assert back.score(t) == pytest.approx(model.score(t), abs=1e-12)
    other = StaticEncoder(shipped.tokenizer, (shipped.embeddings * 2).astype(np.float16))
    with pytest.raises(InputError, match="fitted with encoder"):
        AgentModel.load(tmp_path / "m.json", encoder=other)
    assert (tmp_path / "m.json").stat().st_size < 200_000


def test_a_model_without_the_block_never_loads_the_encoder(runs) -> None:
    traces, failed, groups = runs
    m = AgentModel.fit(traces[:60], failed[:60], groups[:60], config=AgentModelConfig(buckets=1 << 12, internal_folds=0))
    assert m.encoder_ is None and "encoder" not in m.to_dict() and m.start().pool is None


@pytest.mark.parametrize("over", [{"combine": "mean", "split": "encoder"}, {"combine": "stack", "split": "encoder"},
                                  {"encoder_scale": "dim"}])
def test_late_fusion_and_per_column_scaling_score_alike_on_every_path(runs, over) -> None:
    traces, failed, groups = runs
    cfg = AgentModelConfig.from_dict({**CFG.to_dict(), "internal_folds": 0, **over})
    m = AgentModel.fit(traces[:75], failed[:75], groups[:75], config=cfg)
    assert m.fitted_ is not None and m.fitted_.w_emb is not None and len(m.fitted_.buckets)
    back = AgentModel.from_dict(json.loads(json.dumps(m.to_dict())))
    for t in traces[75:80]:
        rows = FeatureCache().rows(t, cfg.buckets, cfg.prefix_fractions, cfg.last_turn, encoded=True)
        assert m.score_rows(rows)[-1] == pytest.approx(m.score(t), abs=1e-6)
        assert back.score(t) == pytest.approx(m.score(t), abs=1e-12)


def test_options_added_later_leave_stored_model_versions_alone() -> None:
    d = AgentModelConfig().to_dict()
    assert "encoder_weight" not in d and "split" not in d and "encoder_scale" not in d
    assert AgentModelConfig(encoder_weight=0.5).to_dict()["encoder_weight"] == 0.5
    with pytest.raises(InputError, match="split"):
        AgentModelConfig(split="rows")
    with pytest.raises(InputError, match="encoder_scale"):
        AgentModelConfig(encoder_scale="none")


def test_the_ascii_path_gives_the_tokenizers_ids(shipped: StaticEncoder) -> None:
    """The encoder's ids (model/scoring/wordpiece.py; tests/test_wordpiece.py has the edges of both
    shipped tokenizers) and the tokenizer's agree on real steps and on the edges: control characters, a
    special token's text, words over WordPiece's 100 characters, accents, CJK, Unicode spaces and
    format characters, the cap."""
    from model.data.realdata import load_source
    from model.scoring.encoder import MAX_TOKENS

    texts = [t for r in load_source("tau_airline")[:60] for t in (step_text(s) for s in r.trace.steps) if t]
    texts += ["", "   ", "a\tb\nc\rd", "x\x0bz\x0cw", "zero\x00byte", "del\x7fete", "say [CLS] and [cls]",
              "[MASK]ed [UNK]", "w" * 101 + " ok", "don't_stop-me.now!!! {a:1} ~`^|\\", "café naïve", "航班 booked",
              "CamelCaseWordsAndNumbers123abc 3.14159", "call get_user_details: {\"user_id\": \"mia_li_3668\"}",
              "word " * 700, "İstanbul ΣΊΣΥΦΟΣ naïve\u00a0x\u3000y", "a\u200bb zero\ufeffwidth", "«quoted» — dash…",
              "👍ok e\u0301 ﬁne Ⅻ ½", "中文abc混合 text", "line\u2028sep\u2029para\u0085nel", "tab\t\u1680ogham",
              "x" * 98 + "é", "é" + "y" * 600]
    want = [np.asarray(e.ids[:MAX_TOKENS]) for e in shipped.tokenizer.encode_batch(texts, add_special_tokens=False)]
    got = shipped.token_ids(texts)
    assert len(got) == len(texts)
    for t, a, b in zip(texts, want, got, strict=True):
        assert np.array_equal(a, b), t[:80]
    assert len(got[texts.index("word " * 700)]) == MAX_TOKENS
