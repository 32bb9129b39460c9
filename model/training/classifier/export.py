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
  (:func:`pooled_embeddings`) with onnxruntime's fast kernels (:func:`pooling_kernels`);
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


def float_activations(src: Path, dst: Path) -> int:
    """Rewrite each dynamically quantised MatMul of ``src`` as an fp32 MatMul on its int8 weights
    dequantised; returns how many. Writes ``dst`` (may be ``src``).

    The pattern ``quantize_dynamic`` writes: ``DynamicQuantizeLinear(x) → MatMulInteger(x_q, W_q, x_zp,
    W_zp) → Cast → Mul(·, x_scale × W_scale)``; it becomes ``MatMul(x, (W_q − W_zp) · W_scale)``, the
    weights' int8 values stored in fp32 (the n-gram student's file: 27.4 → 28.2 MB). Nothing depends on the
    batch but fp32 rounding.
    ``python -m model.training.classifier.export --rewrite FILE`` applies it to a shipped file."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    inits, producer, consumers = _index(graph)

    replaced: dict[int, Any] = {}  # id(MatMulInteger) -> the fp32 MatMul in its place
    dropped: set[int] = set()
    for n in graph.node:
        dql = producer.get(n.input[0]) if n.op_type == "MatMulInteger" else None
        if dql is None or dql.op_type != "DynamicQuantizeLinear":
            continue  # not a quantised activation (pooling_kernels' integer sums are left as they are)
        (cast,) = consumers[n.output[0]]
        (mul,) = consumers[cast.output[0]]
        scales = producer.get(next(i for i in mul.input if i != cast.output[0]))
        if cast.op_type != "Cast" or mul.op_type != "Mul" or scales is None or scales.op_type != "Mul" or n.input[1] not in inits:
            raise ValueError(f"{src}: {n.name} is not the pattern quantize_dynamic writes")
        w_q = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
        w_scale = numpy_helper.to_array(inits[next(i for i in scales.input if i != dql.output[1])])
        w_zp = numpy_helper.to_array(inits[n.input[3]]).astype(np.float32) if len(n.input) > 3 and n.input[3] else 0.0
        # stored as fp32, not as DequantizeLinear → MatMul: onnxruntime fuses that pair into MatMulNBits,
        # which quantises the activations again (per block of a row, with batch-size-dependent kernels)
        name = n.input[1] + "_float"
        if name not in inits:  # once for weights two MatMuls read (an exporter shares equal initializers)
            inits[name] = numpy_helper.from_array(((w_q - w_zp) * w_scale).astype(np.float32), name)
            graph.initializer.append(inits[name])
        replaced[id(n)] = helper.make_node("MatMul", [dql.input[0], name], [mul.output[0]], name=n.name + "_float")
        dropped.update({id(cast), id(mul), id(scales)})
    for n in graph.node:  # a DynamicQuantizeLinear goes once every reader of its outputs has gone
        if n.op_type == "DynamicQuantizeLinear" and all(
                id(c) in replaced or id(c) in dropped for o in n.output for c in consumers.get(o, [])):
            dropped.add(id(n))
    nodes = [replaced.get(id(n), n) for n in graph.node if id(n) not in dropped]
    del graph.node[:]
    graph.node.extend(nodes)
    _tidy(model)
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return len(replaced)


def pooled_embeddings(src: Path, dst: Path) -> int:
    """Pool each n-gram net's embedding rows on their 8-bit values; returns how many tables it rewrote so.
    Writes ``dst`` (may be ``src``).

    A quantised n-gram net (:meth:`~model.training.classifier.ngram.NgramForSequenceClassification._pool`,
    then ``quantize_dynamic``) gathers a table's rows, ``DequantizeLinear(Gather(W_q, ids), s, z)``, and pools
    the [batch, tokens, width] floats twice: the masked mean ``ReduceSum(rows · m) / Clip(M)`` (``M`` the
    mask's sum) and the masked maximum ``ReduceMax(rows + (m − 1) · 1e4)``. Six passes over that tensor a
    table, eight tables in the shipped ensemble: most of a forward's CPU (docs/benchmarks.md, "Round 8").
    Rewritten, the tables that gather the same ids under the same mask (the ensemble's nets, each with its
    unigram and its bigram table) are one table, their columns side by side, with a row of zeros (the
    least 8-bit value) appended; a masked token gathers that row; then

    * ``q = Cast(Gather(W, Where(m, ids, zero row)))``, one gather and one cast for the group;
    * the maximum ``(ReduceMax(q) − z) · s``: bit for bit the original's, as ``(q − z) · s`` is monotone
      in ``q`` and a masked token's row never exceeds another's;
    * the mean ``(ReduceSum(q) − z · M) · s / Clip(M)``: an exact sum of integers, rounded once, where the
      original rounded a float sum at each token (the shipped file's logits move by ≤ 2e-6).

    A row with no token unmasked (never from the runtime, which frames each text with its special tokens)
    keeps its ids, so its maximum is the original's too (its rows' maximum less 1e4), and its mean 0. A table
    read otherwise (a BERT's word embeddings) is left as it is."""
    import hashlib

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 13 or opset > 17:  # Split / Squeeze / ReduceSum take axes as inputs, ReduceMax as an attribute
        raise ValueError(f"{src}: opset {opset}; pooled_embeddings writes opset 13-17 nodes")
    inits, producer, consumers = _index(graph)
    inputs = {i.name for i in graph.input}
    memo: dict[str, Any] = {}

    def value(name: str) -> Any:
        return numpy_helper.to_array(inits[name]) if name in inits else None

    def canon(name: str) -> Any:
        """What computes ``name``, without node names: equal for the nets' copies of one expression."""
        if name not in memo:
            if name in inits:
                a = value(name)
                memo[name] = ("const", a.dtype.str, a.shape, hashlib.sha256(a.tobytes()).hexdigest())
            elif name in inputs or name not in producer:
                memo[name] = ("input", name)
            else:
                n = producer[name]
                attrs = tuple(sorted(a.SerializeToString() for a in n.attribute))
                memo[name] = (n.op_type, n.domain, attrs, tuple(canon(i) for i in n.input), list(n.output).index(name))
        return memo[name]

    def axes(n: Any) -> list[int] | None:
        for a in n.attribute:
            if a.name == "axes":
                return list(a.ints)
        return [int(x) for x in value(n.input[1])] if len(n.input) > 1 and n.input[1] in inits else None

    def keepdims(n: Any) -> int:
        return next((int(a.i) for a in n.attribute if a.name == "keepdims"), 1)

    def made(name: str) -> Any:  # the node that computes ``name`` (None: an input or initializer)
        return producer.get(name)

    def only(name: str, op: str) -> Any:
        readers = consumers.get(name, [])
        return readers[0] if len(readers) == 1 and readers[0].op_type == op else None

    groups: dict[Any, list[dict[str, Any]]] = {}
    for gather in graph.node:
        table = inits.get(gather.input[0]) if gather.op_type == "Gather" else None
        if table is None or table.data_type != TensorProto.UINT8 or len(table.dims) != 2:
            continue
        if any(a.name == "axis" and a.i != 0 for a in gather.attribute):
            continue
        dq = only(gather.output[0], "DequantizeLinear")
        if dq is None or len(dq.input) < 3 or any(value(i) is None or value(i).size != 1 for i in dq.input[1:3]):
            continue
        readers = consumers.get(dq.output[0], [])
        mul = next((r for r in readers if r.op_type == "Mul"), None)
        add = next((r for r in readers if r.op_type == "Add"), None)
        if len(readers) != 2 or mul is None or add is None:
            continue
        mask = next(i for i in mul.input if i != dq.output[0])
        shift = made(next(i for i in add.input if i != dq.output[0]))
        rsum, rmax = only(mul.output[0], "ReduceSum"), only(add.output[0], "ReduceMax")
        div: Any = only(rsum.output[0], "Div") if rsum is not None else None
        clip: Any = made(div.input[1]) if div is not None and rsum is not None and div.input[0] == rsum.output[0] \
            else None
        sub = made(shift.input[0]) if shift is not None and shift.op_type == "Mul" else None
        if (rmax is None or clip is None or clip.op_type != "Clip" or sub is None or sub.op_type != "Sub"
                or axes(rsum) != [1] or axes(rmax) != [1] or keepdims(rsum) or keepdims(rmax)):
            continue
        big, one = value(shift.input[1]), value(sub.input[1])
        count = made(clip.input[0])
        if (canon(sub.input[0]) != canon(mask) or big is None or big.size != 1 or float(big) < 1e3
                or one is None or one.size != 1 or float(one) != 1.0 or count is None
                or count.op_type != "ReduceSum" or canon(count.input[0]) != canon(mask)
                or axes(count) != [1] or keepdims(count)):
            continue  # not the masked mean and maximum of NgramForSequenceClassification._pool
        key = (canon(gather.input[1]), canon(mask), canon(div.input[1]), float(big))
        groups.setdefault(key, []).append({
            "ids": gather.input[1], "mask": mask, "count": clip.input[0], "clip": div.input[1],
            "table": numpy_helper.to_array(table), "scale": float(value(dq.input[1])),
            "zero": float(value(dq.input[2])), "big": float(big), "top": rmax.output[0], "mean": div.output[0],
            "dropped": (gather, dq, mul, add, rsum, rmax, div)})

    dropped = {id(n) for members in groups.values() for m in members for n in m["dropped"]}
    added: list[Any] = []
    consts: list[Any] = []
    for g, members in enumerate(groups.values()):
        p, first = f"pooled_embeddings/{g}", members[0]
        widths = [m["table"].shape[1] for m in members]
        rows = max(m["table"].shape[0] for m in members)
        table = np.zeros((rows + 1, sum(widths)), dtype=np.uint8)  # each net's rows, then the zero row
        col = 0
        for m, w in zip(members, widths, strict=True):
            table[: m["table"].shape[0], col : col + w] = m["table"]
            col += w
        scale = np.concatenate([np.full(w, m["scale"], np.float32) for m, w in zip(members, widths, strict=True)])
        zero = np.concatenate([np.full(w, m["zero"], np.float32) for m, w in zip(members, widths, strict=True)])
        for name, arr in (("table", table), ("scale", scale), ("zero", zero), ("zero_row", np.array(rows, np.int64)),
                          ("axis1", np.array([1], np.int64)), ("axis2", np.array([2], np.int64)),
                          ("widths", np.array(widths, np.int64)), ("none", np.array(0.0, np.float32)),
                          ("one", np.array(1.0, np.float32)), ("big", np.array(first["big"], np.float32))):
            consts.append(numpy_helper.from_array(arr, f"{p}/{name}"))

        def node(op: str, ins: list[str], outs: list[str], p: str = p, **attrs: Any) -> None:
            added.append(helper.make_node(op, ins, outs, name=f"{p}/{op}_{len(added)}", **attrs))

        # a row with no token unmasked keeps its ids: its maximum is then the original's, all rows less 1e4
        node("Equal", [first["count"], f"{p}/none"], [f"{p}/empty"])
        node("Cast", [f"{p}/empty"], [f"{p}/emptyf"], to=TensorProto.FLOAT)
        node("Squeeze", [first["mask"], f"{p}/axis2"], [f"{p}/mask"])
        node("Cast", [f"{p}/mask"], [f"{p}/unmasked"], to=TensorProto.BOOL)
        node("Or", [f"{p}/unmasked", f"{p}/empty"], [f"{p}/kept"])
        node("Cast", [first["ids"]], [f"{p}/ids64"], to=TensorProto.INT64)  # the zero row's index is int64
        node("Where", [f"{p}/kept", f"{p}/ids64", f"{p}/zero_row"], [f"{p}/ids"])
        node("Gather", [f"{p}/table", f"{p}/ids"], [f"{p}/q8"])
        node("Cast", [f"{p}/q8"], [f"{p}/q"], to=TensorProto.FLOAT)
        node("ReduceMax", [f"{p}/q"], [f"{p}/qmax"], axes=[1], keepdims=0)
        node("Sub", [f"{p}/qmax", f"{p}/zero"], [f"{p}/topc"])
        node("Mul", [f"{p}/topc", f"{p}/scale"], [f"{p}/topq"])
        node("Mul", [f"{p}/emptyf", f"{p}/big"], [f"{p}/shift"])
        node("Sub", [f"{p}/topq", f"{p}/shift"], [f"{p}/top"])
        node("Split", [f"{p}/top", f"{p}/widths"], [m["top"] for m in members], axis=1)
        node("ReduceSum", [f"{p}/q", f"{p}/axis1"], [f"{p}/qsum"], keepdims=0)
        node("Mul", [first["count"], f"{p}/zero"], [f"{p}/zsum"])
        node("Sub", [f"{p}/qsum", f"{p}/zsum"], [f"{p}/sumc"])
        node("Mul", [f"{p}/sumc", f"{p}/scale"], [f"{p}/sum"])
        node("Div", [f"{p}/sum", first["clip"]], [f"{p}/meanq"])
        node("Sub", [f"{p}/one", f"{p}/emptyf"], [f"{p}/full"])
        node("Mul", [f"{p}/meanq", f"{p}/full"], [f"{p}/mean"])
        node("Split", [f"{p}/mean", f"{p}/widths"], [m["mean"] for m in members], axis=1)
    if groups:
        nodes = [n for n in graph.node if id(n) not in dropped] + added
        del graph.node[:]
        graph.node.extend(nodes)
        graph.initializer.extend(consts)
        _tidy(model)
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return sum(len(m) for m in groups.values())


def pooling_kernels(src: Path, dst: Path) -> int:
    """Pool gathered 8-bit rows over their tokens with onnxruntime's fast kernels; returns how many
    reductions it rewrote so. Writes ``dst`` (may be ``src``).

    :func:`pooled_embeddings` leaves, for each group of tables, ``q = Cast(q8)`` of the gathered
    [batch, tokens, width] 8-bit rows, read by ``ReduceMax(q, axis 1)`` and ``ReduceSum(q, axis 1)``.
    onnxruntime reduces the middle axis of a batch of one (the session path scores one step) element by
    element: ~110 µs of the two reductions a group for a step of 200 tokens, where the whole forward is
    ~380 µs (docs/benchmarks.md, "Round 12"). Rewritten,

    * the maximum is ``Squeeze(GlobalMaxPool(Cast(Transpose(q8))))``: the tokens on the last axis, pooled
      by MLAS, the transpose on 8-bit values;
    * the sum is ``Squeeze(Cast(MatMulInteger(1, q8)))``: a row of ones times the rows, an int32 sum.

    Both are the originals bit for bit: maxima of integers, and sums of integers that float32 holds
    exactly whatever the order while they stay under 2²⁴ (fewer than 65,793 tokens of at most 255; the
    runtime truncates a text at its ``max_length``). A ``Cast`` whose float tensor anything else reads, or
    whose rows are not a 2-D table's gathered by 2-D ids, is left as it is."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 13 or opset > 17:  # Squeeze / Unsqueeze / ReduceSum take axes as inputs, ReduceMax as an attribute
        raise ValueError(f"{src}: opset {opset}; pooling_kernels writes opset 13-17 nodes")
    inits, producer, consumers = _index(graph)
    ranks = {v.name: len(v.type.tensor_type.shape.dim)
             for v in onnx.shape_inference.infer_shapes(model).graph.value_info if v.type.tensor_type.HasField("shape")}
    ranks.update((i.name, len(i.type.tensor_type.shape.dim)) for i in graph.input)
    outputs = {o.name for o in graph.output}

    def axes(n: Any) -> list[int] | None:
        for a in n.attribute:
            if a.name == "axes":
                return list(a.ints)
        if len(n.input) > 1 and n.input[1] in inits:
            return [int(x) for x in numpy_helper.to_array(inits[n.input[1]])]
        return None

    def pools(n: Any) -> bool:  # a reduction of the tokens' axis, dropped
        return n.op_type in ("ReduceMax", "ReduceSum") and axes(n) == [1] \
            and next((a.i for a in n.attribute if a.name == "keepdims"), 1) == 0

    dropped: set[int] = set()
    added: list[Any] = []
    consts: dict[str, Any] = {}
    for cast in graph.node:
        if cast.op_type != "Cast" or next((a.i for a in cast.attribute if a.name == "to"), None) != TensorProto.FLOAT:
            continue
        gather: Any = producer.get(cast.input[0])
        table = inits.get(gather.input[0]) if gather is not None and gather.op_type == "Gather" else None
        readers = consumers.get(cast.output[0], [])
        if (table is None or table.data_type != TensorProto.UINT8 or len(table.dims) != 2
                or any(a.name == "axis" and a.i != 0 for a in gather.attribute) or ranks.get(gather.input[1]) != 2
                or not readers or not all(pools(r) for r in readers) or cast.output[0] in outputs):
            continue
        q8, p = cast.input[0], f"{cast.output[0]}/kernels"
        dropped.update(id(n) for n in (cast, *readers))
        for name, arr in (("axis1", np.array([1], np.int64)), ("axis2", np.array([2], np.int64))):
            consts.setdefault(name, numpy_helper.from_array(arr, f"pooling_kernels/{name}"))

        def node(op: str, ins: list[str], outs: list[str], p: str = p, **attrs: Any) -> None:
            added.append(helper.make_node(op, ins, outs, name=f"{p}/{op}_{len(added)}", **attrs))

        for r in readers:
            if r.op_type == "ReduceMax":
                node("Transpose", [q8], [f"{p}/tokens_last"], perm=[0, 2, 1])
                node("Cast", [f"{p}/tokens_last"], [f"{p}/tokens_lastf"], to=TensorProto.FLOAT)
                node("GlobalMaxPool", [f"{p}/tokens_lastf"], [f"{p}/max"])
                node("Squeeze", [f"{p}/max", "pooling_kernels/axis2"], [r.output[0]])
            else:
                node("Shape", [gather.input[1]], [f"{p}/shape"])
                node("ConstantOfShape", [f"{p}/shape"], [f"{p}/ones"],
                     value=numpy_helper.from_array(np.array([1], np.uint8)))
                node("Unsqueeze", [f"{p}/ones", "pooling_kernels/axis1"], [f"{p}/ones_row"])
                node("MatMulInteger", [f"{p}/ones_row", q8], [f"{p}/sum32"])
                node("Cast", [f"{p}/sum32"], [f"{p}/sumf"], to=TensorProto.FLOAT)
                node("Squeeze", [f"{p}/sumf", "pooling_kernels/axis1"], [r.output[0]])
    if added:
        nodes = [n for n in graph.node if id(n) not in dropped] + added
        del graph.node[:]
        graph.node.extend(nodes)
        graph.initializer.extend(consts.values())
        _tidy(model)
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return sum(n.op_type in ("GlobalMaxPool", "MatMulInteger") for n in added)


def _index(graph: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, list[Any]]]:
    """``graph``'s initializers by name, the node that computes each tensor, and the nodes that read each."""
    consumers: dict[str, list[Any]] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    return {t.name: t for t in graph.initializer}, {o: n for n in graph.node for o in n.output}, consumers


def _tidy(model: Any) -> None:
    """Drop the nodes nothing reads any more, the initializers and shapes of tensors gone, and put the
    nodes in an order that computes each input before it is read."""
    graph = model.graph
    nodes, wanted = list(graph.node), {o.name for o in graph.output}
    while True:
        read = {i for n in nodes for i in n.input} | wanted
        live = [n for n in nodes if any(o in read for o in n.output)]
        if len(live) == len(nodes):
            break
        nodes = live
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    ordered: list[Any] = []
    while nodes:
        ready = {id(n) for n in nodes if all(i in known for i in n.input)}
        if not ready:
            raise ValueError("the rewritten graph has a cycle or reads a tensor nothing computes")
        ordered.extend(n for n in nodes if id(n) in ready)
        known.update(o for n in nodes if id(n) in ready for o in n.output)
        nodes = [n for n in nodes if id(n) not in ready]
    del graph.node[:]
    graph.node.extend(ordered)
    read = {i for n in graph.node for i in n.input}
    kept = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    made = {o for n in graph.node for o in n.output}
    shapes = [v for v in graph.value_info if v.name in made]
    del graph.value_info[:]
    graph.value_info.extend(shapes)


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
