"""ONNX export of a trained classifier: fp32, fused, int8 — with its metadata and tokenizer.

For one trained model folder (``save_pretrained`` weights + ``tokenizer.json`` +
``calibration.json``), :func:`export_model` writes

* ``classifier.fp32.onnx`` — torch's TorchScript exporter (``dynamo=False``, opset 17), named
  inputs ``input_ids``, ``attention_mask``, ``token_type_ids``, output ``logits``, dynamic batch and
  sequence axes;
* ``classifier.fused.onnx`` — onnxruntime's transformer optimizer (Attention / EmbedLayerNorm
  fusion; the model is loaded with eager attention so that the fusion applies);
* ``classifier.onnx`` — the fused graph's weights in int8, per channel (onnxruntime's dynamic
  quantisation), its activations in fp32 (:func:`float_activations`): a text's logits do not depend on
  the batch it is scored in; an n-gram net's embedding rows pooled on their 8-bit values
  (:func:`pooled_embeddings`) with onnxruntime's fast kernels (:func:`pooling_kernels`; the three
  rewrites live in :mod:`model.training.classifier.onnx_rewrites`);
* ``tokenizer.json`` — truncation at the model's ``max_length``;

each ONNX file carrying the metadata :mod:`model.scoring.classifier.runtime` reads (labels, thresholds,
temperature, representation settings, tokenizer settings, model version).

``python -m model.training.classifier.export`` (the DVC ``export`` stage) exports every candidate, measures
its one-step latency on this machine, and copies the most accurate one within
``params.yaml:export.latency_target_ms`` into ``model/artifacts/``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from model.scoring.classifier.runtime import META_PREFIX, MODEL_FILE, TOKENIZER_FILE, ClassifierRuntime
from model.training.classifier.config import ExportConfig
from model.training.classifier.onnx_rewrites import float_activations, pooled_embeddings, pooling_kernels
from model.training.classifier.train import CALIBRATION

log = logging.getLogger("model.training.classifier.export")

FP32_FILE = "classifier.fp32.onnx"
FUSED_FILE = "classifier.fused.onnx"
#: The shipped graph's ``quantisation`` metadata.
QUANTISATION = "int8 weights per channel, fp32 activations, embeddings pooled on their 8-bit values"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def metadata_for(info: dict[str, Any]) -> dict[str, str]:
    """The ``triage.*`` metadata entries from a ``calibration.json`` summary."""
    return {
        META_PREFIX + "labels": json.dumps(info["labels"]),
        META_PREFIX + "thresholds": json.dumps([round(float(t), 4) for t in info["thresholds"]]),
        META_PREFIX + "temperature": repr(float(info["temperature"])),
        META_PREFIX + "representation": json.dumps(info["representation"], sort_keys=True),
        META_PREFIX + "tokenizer": json.dumps(
            {"file": TOKENIZER_FILE, "max_length": int(info["max_length"]), "truncation": "right",
             "padding": "longest"}, sort_keys=True),
        META_PREFIX + "model_version": str(info["model_version"]),
        META_PREFIX + "model_name": str(info["model_name"]),
        META_PREFIX + "val_step_macro_f1": repr(round(float(info.get("val_step_macro_f1", 0.0)), 4)),
    }


def set_metadata(path: Path, meta: dict[str, str]) -> None:
    import onnx

    proto = onnx.load(str(path))
    del proto.metadata_props[:]
    for k, v in sorted(meta.items()):
        entry = proto.metadata_props.add()
        entry.key, entry.value = k, v
    onnx.save(proto, str(path))


def to_onnx(model: Any, path: Path, *, opset: int = 17) -> None:
    """Export a Hugging Face sequence classifier to ONNX with the old (TorchScript) exporter."""
    import torch

    class _Logits(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).logits

    model.eval()
    wrapper = _Logits(model).eval()
    ids = torch.ones((2, 8), dtype=torch.long)
    args = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    axes = {n: {0: "batch", 1: "sequence"} for n in INPUT_NAMES}
    axes["logits"] = {0: "batch"}
    with torch.no_grad():
        torch.onnx.export(wrapper, args, str(path), input_names=list(INPUT_NAMES), output_names=["logits"],
                          dynamic_axes=axes, opset_version=opset, dynamo=False, do_constant_folding=True)


def fuse(src: Path, dst: Path, *, num_heads: int, hidden: int) -> None:
    """onnxruntime's BERT fusion (Attention, EmbedLayerNormalization, SkipLayerNorm, BiasGelu)."""
    from onnxruntime.transformers.optimizer import optimize_model

    opt = optimize_model(str(src), model_type="bert", num_heads=num_heads, hidden_size=hidden)
    opt.save_model_to_file(str(dst))


def quantize(src: Path, dst: Path, *, pool: bool = True) -> None:
    """Weights in int8, per channel (per-tensor moved MiniLM's outputs too far, MEASUREMENTS.md), in 7 bits
    (``reduce_range``); activations left in fp32 (:func:`float_activations`); an n-gram net's embedding rows
    pooled on their 8-bit values (:func:`pooled_embeddings`, then :func:`pooling_kernels`; ``pool=False``
    leaves them as quantised).

    onnxruntime's dynamic quantisation also quantises each MatMul's input, with one scale for the whole
    tensor: in a batch, a text's logits then moved with its companions (0.018 in probability on
    ``docs/examples/ignored_error.json`` between the session path, one step alone, and the whole trace in
    one batch, on an AVX2 CPU; 6e-4 with VNNI), and with the CPU's int8 kernels."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = dst.with_suffix(".pre.onnx")
    try:
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        quantize_dynamic(str(pre), str(dst), per_channel=True, reduce_range=True, weight_type=QuantType.QInt8,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        float_activations(dst, dst)
        if pool:
            pooled_embeddings(dst, dst)
            pooling_kernels(dst, dst)
    finally:
        for leftover in (pre, *dst.parent.glob("*.pre.onnx.data"), *dst.parent.glob("*.onnx.data")):
            leftover.unlink(missing_ok=True)


def export_model(model_dir: Path, out_dir: Path, *, quantise: bool = True, fuse_graph: bool = True) -> Path:
    """Export ``model_dir`` (weights + tokenizer + calibration) into ``out_dir``; returns the int8 path.

    With ``quantise=False`` the shipped ``classifier.onnx`` is the fp32 (fused) graph.
    """
    from model.training.classifier.checkpoint import load_classifier

    info = json.loads((model_dir / CALIBRATION).read_text(encoding="utf-8"))
    out_dir.mkdir(parents=True, exist_ok=True)
    model = load_classifier(model_dir)
    conf = model.config
    fp32, fused, final = out_dir / FP32_FILE, out_dir / FUSED_FILE, out_dir / MODEL_FILE
    to_onnx(model, fp32)
    meta = metadata_for(info)
    set_metadata(fp32, meta)
    if fuse_graph and conf.model_type == "bert":
        fuse(fp32, fused, num_heads=conf.num_attention_heads, hidden=conf.hidden_size)
    else:
        shutil.copyfile(fp32, fused)
    set_metadata(fused, meta)
    if quantise:
        quantize(fused, final)
    else:
        shutil.copyfile(fused, final)
    set_metadata(final, meta | {META_PREFIX + "quantisation": QUANTISATION if quantise else "none"})
    shutil.copyfile(model_dir / TOKENIZER_FILE, out_dir / TOKENIZER_FILE)
    shutil.copyfile(model_dir / CALIBRATION, out_dir / CALIBRATION)
    return final


def one_step_latency_ms(rt: ClassifierRuntime, texts: list[str], *, repeats: int = 60) -> float:
    """Median milliseconds to score one text (tokenize + forward + calibration)."""
    for t in texts[:5]:
        rt.predict_proba([t])
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        rt.predict_proba([texts[i % len(texts)]])
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def select(candidates: dict[str, dict[str, Any]], target_ms: float, ship: str = "auto") -> str:
    """The candidate to ship: ``ship`` when named, else the best validation F1 within ``target_ms``
    (trace-level kind macro-F1 where the candidate's stage measured it, step-level otherwise).

    >>> select({"a": {"val_f1": 0.9, "p50_ms": 30}, "b": {"val_f1": 0.8, "p50_ms": 3}}, 25.0)
    'b'
    """
    if ship != "auto":
        if ship not in candidates:
            raise ValueError(f"export.ship names {ship!r}; candidates are {sorted(candidates)}")
        return ship
    within = {k: v for k, v in candidates.items() if v["p50_ms"] <= target_ms}
    pool = within or candidates
    return max(pool, key=lambda k: (pool[k]["val_f1"], -pool[k]["p50_ms"]))


def run(cfg: ExportConfig, build: Path, artifacts: Path, sample_texts: list[str]) -> dict[str, Any]:
    """Export each candidate under ``build/<name>/best`` to ``build/onnx/<name>`` and ship one."""
    results: dict[str, dict[str, Any]] = {}
    for name in cfg.candidates:
        src = build / name / "best"
        if not (src / CALIBRATION).exists():
            log.warning("candidate %s has no trained model at %s: skipped", name, src)
            continue
        out = build / "onnx" / name
        t0 = time.perf_counter()
        fresh = (out / MODEL_FILE).exists() and (out / CALIBRATION).exists() and (
            (out / CALIBRATION).read_bytes() == (src / CALIBRATION).read_bytes())
        if fresh:  # exported from this very training run already (DVC removes outs, so it re-exports)
            log.info("candidate %s already exported from the same training run", name)
        else:
            export_model(src, out)
        rt = ClassifierRuntime.load(out, threads=cfg.threads)
        info = json.loads((src / CALIBRATION).read_text(encoding="utf-8"))
        results[name] = {
            # whole validation traces where the stage tuned them (the service's verdict), else steps
            "val_f1": float(info.get("val_trace_kind_macro_f1", info["val_step_macro_f1"])),
            "p50_ms": round(one_step_latency_ms(rt, sample_texts), 2),
            "bytes": (out / MODEL_FILE).stat().st_size,
            "export_s": round(time.perf_counter() - t0, 1),
        }
        log.info("exported %s: %s", name, results[name])
    if not results:
        raise FileNotFoundError(f"no trained candidate under {build} (looked for {cfg.candidates})")
    chosen = select(results, cfg.latency_target_ms, cfg.ship)
    artifacts.mkdir(parents=True, exist_ok=True)
    for f in (MODEL_FILE, TOKENIZER_FILE):
        shutil.copyfile(build / "onnx" / chosen / f, artifacts / f)
    selection = {"shipped": chosen, "latency_target_ms": cfg.latency_target_ms, "candidates": results}
    (build / "onnx" / "selection.json").write_text(json.dumps(selection, indent=2) + "\n", encoding="utf-8")
    log.info("shipped %s to %s", chosen, artifacts)
    return selection


def main(argv: list[str] | None = None) -> None:
    from model.scoring.classifier.representation import step_text
    from model.training.classifier.data import load_traces

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--params", type=Path, default=Path("params.yaml"))
    p.add_argument("--build", type=Path, default=Path("build/classifier"))
    p.add_argument("--splits", type=Path, default=Path("datasets/splits"))
    p.add_argument("--artifacts", type=Path, default=Path("model/artifacts"))
    p.add_argument("--rewrite", type=Path, default=None, metavar="FILE",
                   help="rewrite an exported int8 FILE in place as export now writes it (float_activations, "
                        "pooled_embeddings, pooling_kernels) and stop")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.rewrite is not None:
        import onnx

        if not args.rewrite.is_file():
            p.error(f"--rewrite: no such file: {args.rewrite}")
        n = float_activations(args.rewrite, args.rewrite)
        k = pooled_embeddings(args.rewrite, args.rewrite)
        r = pooling_kernels(args.rewrite, args.rewrite)
        meta = {e.key: e.value for e in onnx.load(str(args.rewrite)).metadata_props}
        set_metadata(args.rewrite, meta | {META_PREFIX + "quantisation": QUANTISATION})
        log.info("%s: %d MatMuls now take fp32 activations, %d embedding tables pooled on 8-bit values, "
                 "%d poolings on onnxruntime's fast kernels", args.rewrite, n, k, r)
        return
    traces = load_traces(args.splits / "val.jsonl", limit=20)
    texts = [step_text(t, i) for t in traces for i in range(len(t.steps))][:200]
    run(ExportConfig.from_params(args.params), args.build, args.artifacts, texts)


if __name__ == "__main__":
    main()
