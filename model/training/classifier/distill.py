"""Distil the fine-tuned MiniLM into a small student with its own bilingual vocabulary (training only).

``python -m model.training.classifier.distill`` (the DVC ``distill`` stage):

1. samples many more step examples than the teacher saw (``params.yaml:distill``);
2. trains a WordPiece vocabulary on them (:mod:`model.training.classifier.vocab`), so Chinese is read
   character by character instead of as ``[UNK]``;
3. scores ``soft_examples`` of them with the teacher (its calibrated probabilities);
4. trains a small BERT (``layers`` × ``hidden``) from scratch on
   ``(1 - soft_weight) * BCE(ground truth) + soft_weight * BCE(teacher)`` (the soft part only where
   the teacher scored the example), with the same early stopping, checkpoints and calibration as
   the teacher.

Without a teacher folder (``--teacher none``) the student trains on the ground truth alone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from model.core.errors import InputError
from model.core.metrics import sigmoid
from model.scoring.classifier.representation import DEFAULT_CONFIG
from model.training.classifier.checkpoint import (
    load_classifier,
    load_tokenizer,
    predict_logits,
    save_tokenizer,
)
from model.training.classifier.config import DistillConfig
from model.training.classifier.data import LABELS, load_traces, sample_examples, targets_matrix
from model.training.classifier.train import (
    BEST,
    CALIBRATION,
    LoopSettings,
    calibrate,
    finish_candidate,
    fit,
    setup_logging,
)
from model.training.classifier.vocab import MARKERS, train_wordpiece, unk_rate

log = logging.getLogger("model.training.classifier.distill")


def _teacher_key(teacher_dir: Path, texts: list[str]) -> str:
    """A fingerprint of the teacher's weights and calibration and of the texts it scores."""
    h = hashlib.sha256()
    for name in sorted(p.name for p in teacher_dir.iterdir() if p.is_file()):
        h.update(name.encode())
        h.update((teacher_dir / name).read_bytes())
    for text in texts:
        h.update(text.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def teacher_probs(teacher_dir: Path, texts: list[str], batch_size: int) -> np.ndarray:
    """The teacher's calibrated probabilities ``sigmoid(logits / T)`` over ``texts``."""
    info = json.loads((teacher_dir / CALIBRATION).read_text(encoding="utf-8"))
    tok = load_tokenizer(teacher_dir / "tokenizer.json", int(info["max_length"]))
    model = load_classifier(teacher_dir)
    logits = predict_logits(model, tok, texts, batch_size=batch_size)
    return sigmoid(logits / float(info["temperature"]))


def student_model(cfg: DistillConfig, tok: Any) -> Any:
    """A fresh student: ``cfg.arch`` ``bert`` (``layers`` × ``hidden``) or ``ngram`` (:mod:`.ngram`)."""
    from transformers import BertConfig, BertForSequenceClassification

    vocab_size = tok.get_vocab_size()
    labels = {"num_labels": len(LABELS), "problem_type": "multi_label_classification",
              "id2label": dict(enumerate(LABELS)), "label2id": {n: i for i, n in enumerate(LABELS)}}
    if cfg.arch == "ngram":
        from model.training.classifier.ngram import NgramConfig, NgramForSequenceClassification

        markers = [tok.token_to_id(m) for m in MARKERS]
        if any(m is None for m in markers):
            raise InputError(f"the student vocabulary lacks the line markers {MARKERS}",
                             path="params.yaml:arch")
        nconf = NgramConfig(vocab_size=vocab_size, dim=cfg.dim, buckets=cfg.buckets, hidden=cfg.hidden,
                            dropout=cfg.dropout, token_dropout=cfg.token_dropout, marker_ids=markers,
                            pad_token_id=0, **labels)
        return NgramForSequenceClassification(nconf)
    if cfg.arch != "bert":
        raise InputError(f"unknown student arch {cfg.arch!r}; use bert or ngram", path="params.yaml:arch")

    conf = BertConfig(  # type: ignore[call-arg]
        vocab_size=vocab_size,
        hidden_size=cfg.hidden,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        intermediate_size=cfg.intermediate,
        max_position_embeddings=max(cfg.max_length, 64),
        type_vocab_size=2,
        num_labels=len(LABELS),
        problem_type="multi_label_classification",
        id2label=dict(enumerate(LABELS)),
        label2id={n: i for i, n in enumerate(LABELS)},
        pad_token_id=0,
    )
    conf._attn_implementation = "eager"
    return BertForSequenceClassification(conf)


def _fit_ensemble(cfg: DistillConfig, traces: list[Any], first: Any, tok: Any, train: list[Any],
                  val: list[Any], settings: LoopSettings, out_dir: Path) -> tuple[dict[str, Any], int]:
    """Train ``cfg.ensemble`` n-gram nets apart — member k on its own sample (seed + 1000·k) and
    initialisation, all on one vocabulary, each with its own checkpoints under ``member-k`` — and
    save the model that averages their logits to ``out_dir/best``."""
    import torch

    from model.training.classifier.ngram import ensemble_of

    summaries, nets, n_train = [], [], 0
    for k in range(cfg.ensemble):
        seed = cfg.seed + 1000 * k
        if k == 0:
            sample, model = train, first
        else:
            sample = sample_examples(traces, max_examples=cfg.train_examples, seed=seed + 100,
                                     failure_fraction=cfg.failure_fraction,
                                     post_failure=cfg.post_failure)  # type: ignore[arg-type]
            torch.manual_seed(seed)
            model = student_model(cfg, tok)
        log.info("ensemble member %d/%d: %d examples, seed %d", k + 1, cfg.ensemble, len(sample), seed)
        summaries.append(fit(model, tok, sample, val, replace(settings, seed=seed), out_dir / f"member-{k}"))
        nets.append(load_classifier(out_dir / f"member-{k}" / BEST))
        n_train += len(sample)
    best_dir = out_dir / BEST
    if best_dir.exists():
        shutil.rmtree(best_dir)
    ensemble_of(nets).save_pretrained(best_dir)
    summary = {"members": summaries, "steps": sum(int(m["steps"]) for m in summaries),
               "seconds": round(sum(float(m["seconds"]) for m in summaries), 1)}
    return summary, n_train


def run(cfg: DistillConfig, splits: Path, teacher_dir: Path | None, out_dir: Path, *,
        model_version: str = "student-1", soft_examples: int | None = None) -> dict[str, Any]:
    """The whole student stage; returns the calibration summary it writes to ``out_dir/best``."""
    import torch

    setup_logging(out_dir)
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    n_soft = cfg.soft_examples if soft_examples is None else soft_examples
    wants_soft = teacher_dir is not None and cfg.soft_weight > 0 and n_soft > 0
    members = cfg.ensemble if cfg.arch == "ngram" else 1
    if members > 1 and (wants_soft or cfg.init_from):
        raise InputError("an ensemble of n-gram students trains from scratch on the ground truth: set "
                         "ensemble: 1 with a teacher or init_from", path="params.yaml:ensemble")
    t0 = time.perf_counter()
    traces = load_traces(splits / "train.jsonl")
    train = sample_examples(traces, max_examples=cfg.train_examples,
                            seed=cfg.seed + 100, failure_fraction=cfg.failure_fraction,
                            post_failure=cfg.post_failure)  # type: ignore[arg-type]
    train_traces = traces if members > 1 else []  # the other ensemble members sample from them
    del traces
    val = sample_examples(load_traces(splits / "val.jsonl"), max_examples=cfg.val_examples,
                          seed=cfg.seed + 101, failure_fraction=cfg.val_failure_fraction,
                          post_failure=cfg.post_failure)  # type: ignore[arg-type]
    log.info("sampled %d train / %d val in %.1fs", len(train), len(val), time.perf_counter() - t0)
    texts = [e.text for e in train]
    vocab_path = out_dir / "vocab-tokenizer.json"
    init = Path(cfg.init_from) if cfg.init_from else None
    if init is not None:
        if not (init / CALIBRATION).exists():
            raise InputError(f"init_from {init} holds no trained student (no {CALIBRATION})",
                             path="params.yaml:distill.init_from")
        shutil.copyfile(init / "tokenizer.json", vocab_path)
    tok = None
    if vocab_path.exists():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(vocab_path))
        if any(tok.token_to_id(m) is None for m in MARKERS):
            log.info("%s predates the line markers %s: training a new vocabulary", vocab_path, MARKERS)
            tok = None
    if tok is None:
        tok = train_wordpiece(texts, vocab_size=cfg.vocab_size)
        tok.save(str(vocab_path))
    tok.no_padding()
    tok.enable_truncation(max_length=cfg.max_length)
    zh = [e.text for e in val if e.language == "zh"][:500]
    en = [e.text for e in val if e.language == "en"][:500]
    log.info("vocabulary %d tokens; [UNK] rate en %.4f zh %.4f", tok.get_vocab_size(),
             unk_rate(tok, en), unk_rate(tok, zh))

    soft: np.ndarray | None = None
    if wants_soft:
        assert teacher_dir is not None
        soft_path = out_dir / "teacher-probs.npy"
        n_soft = min(n_soft, len(texts))
        # the cached scores are reused only for the same teacher on the same texts
        key = _teacher_key(teacher_dir, texts[:n_soft])
        key_path = soft_path.with_suffix(".key")
        if (soft_path.exists() and key_path.exists() and key_path.read_text(encoding="utf-8") == key
                and np.load(soft_path).shape == (n_soft, len(LABELS))):
            part = np.load(soft_path)
            log.info("teacher scores of %d examples reused from %s", n_soft, soft_path)
        else:
            t1 = time.perf_counter()
            part = teacher_probs(teacher_dir, texts[:n_soft], cfg.teacher_batch)
            np.save(soft_path, part)
            key_path.write_text(key, encoding="utf-8")
            log.info("teacher scored %d examples in %.1fs", n_soft, time.perf_counter() - t1)
        soft = np.full((len(texts), len(LABELS)), np.nan, dtype=np.float32)
        soft[:n_soft] = part
        hard = targets_matrix(train[:n_soft])
        agree = float(np.mean((part >= 0.5) == (hard > 0.5)))
        log.info("teacher agrees with the ground truth on %.4f of (example, label) pairs", agree)

    if init is not None:
        model = load_classifier(init)
        log.info("student initialised from %s", init)
    else:
        model = student_model(cfg, tok)
    settings = LoopSettings(
        max_length=cfg.max_length, batch_size=cfg.batch_size, epochs=cfg.epochs, lr=cfg.lr,
        warmup_fraction=cfg.warmup_fraction, weight_decay=cfg.weight_decay,
        max_pos_weight=cfg.max_pos_weight, eval_every=cfg.eval_every, patience=cfg.patience,
        seed=cfg.seed, max_minutes=cfg.max_minutes, soft_weight=cfg.soft_weight if soft is not None else 0.0,
    )
    if members <= 1:
        summary: dict[str, Any] = fit(model, tok, train, val, settings, out_dir, soft=soft)
        n_train = len(train)
    else:
        summary, n_train = _fit_ensemble(cfg, train_traces, model, tok, train, val, settings, out_dir)
    best = load_classifier(out_dir / BEST)
    logits = predict_logits(best, tok, [e.text for e in val])
    info = calibrate(logits, targets_matrix(val))
    save_tokenizer(tok, out_dir / BEST / "tokenizer.json", cfg.max_length)
    info.update({
        "labels": list(LABELS),
        "model_name": (f"student n-gram net{f' ensemble of {members}' if members > 1 else ''} ({cfg.dim}-d, "
                       f"{cfg.buckets} bigram buckets, hidden {cfg.hidden}), own WordPiece vocabulary"
                       if cfg.arch == "ngram" else
                       f"student BERT {best.config.num_hidden_layers}x{best.config.hidden_size}, "
                       "own WordPiece vocabulary"),
        "init_from": cfg.init_from,
        "model_version": model_version, "max_length": cfg.max_length,
        "representation": DEFAULT_CONFIG.to_dict(), "train_examples": n_train, "ensemble": members, "val_examples": len(val),
        "soft_examples": 0 if soft is None else int(n_soft), "training": summary,
        "distill": {k: v for k, v in replace(cfg).__dict__.items()},
    })
    return finish_candidate(out_dir, info, splits, calib_traces=cfg.calib_traces, seed=cfg.seed, log=log)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--params", type=Path, default=Path("params.yaml"))
    p.add_argument("--splits", type=Path, default=Path("datasets/splits"))
    p.add_argument("--teacher", default="build/classifier/minilm/best")
    p.add_argument("--out", type=Path, default=Path("build/classifier/student"))
    p.add_argument("--section", default="distill", help="params.yaml section to read")
    p.add_argument("--version", default="student-1", help="model version recorded in the artefact")
    args = p.parse_args(argv)
    teacher = None if args.teacher == "none" else Path(args.teacher)
    run(DistillConfig.from_params(args.params, args.section), args.splits, teacher, args.out,
        model_version=args.version)


if __name__ == "__main__":
    main()
