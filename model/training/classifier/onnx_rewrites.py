"""Rewrites of an exported int8 classifier graph that keep its answers and cut its forward's CPU.

:func:`~model.training.classifier.export.quantize` runs them in this order on the file
``quantize_dynamic`` writes, and ``python -m model.training.classifier.export --rewrite FILE`` on a file
already exported (each finds nothing left to rewrite on its own output):

* :func:`float_activations` — each dynamically quantised MatMul as an fp32 MatMul on its int8 weights:
  a text's logits do not depend on the batch it is scored in;
* :func:`pooled_embeddings` — an n-gram net's embedding rows pooled on their 8-bit values, the tables
  that gather the same ids one table;
* :func:`pooling_kernels` — those poolings on onnxruntime's fast kernels, bit for bit the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def float_activations(src: Path, dst: Path) -> int:
    """Rewrite each dynamically quantised MatMul of ``src`` as an fp32 MatMul on its int8 weights
    dequantised; returns how many. Writes ``dst`` (may be ``src``).

    The pattern ``quantize_dynamic`` writes: ``DynamicQuantizeLinear(x) → MatMulInteger(x_q, W_q, x_zp,
    W_zp) → Cast → Mul(·, x_scale × W_scale)``; it becomes ``MatMul(x, (W_q − W_zp) · W_scale)``, the
    weights' int8 values stored in fp32 (the n-gram student's file: 27.4 → 28.2 MB). Nothing depends on the
    batch but fp32 rounding.
    ``python -m model.training.classifier.export --rewrite FILE`` applies it to a shipped file."""
    import numpy as np
    from onnx import helper, numpy_helper

    model, inits, producer, consumers = _opened(src)
    graph = model.graph

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
    _splice(model, [replaced.get(id(n), n) for n in graph.node if id(n) not in dropped])
    _save(model, dst)
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
    from onnx import TensorProto, helper, numpy_helper

    model, inits, producer, consumers = _opened(src, "pooled_embeddings")
    graph = model.graph
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
                or _axes(rsum, inits) != [1] or _axes(rmax, inits) != [1] or _keepdims(rsum) or _keepdims(rmax)):
            continue
        big, one = value(shift.input[1]), value(sub.input[1])
        count = made(clip.input[0])
        if (canon(sub.input[0]) != canon(mask) or big is None or big.size != 1 or float(big) < 1e3
                or one is None or one.size != 1 or float(one) != 1.0 or count is None
                or count.op_type != "ReduceSum" or canon(count.input[0]) != canon(mask)
                or _axes(count, inits) != [1] or _keepdims(count)):
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
        _splice(model, [n for n in graph.node if id(n) not in dropped] + added, consts)
    _save(model, dst)
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

    model, inits, producer, consumers = _opened(src, "pooling_kernels")
    graph = model.graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim)
             for v in onnx.shape_inference.infer_shapes(model).graph.value_info if v.type.tensor_type.HasField("shape")}
    ranks.update((i.name, len(i.type.tensor_type.shape.dim)) for i in graph.input)
    outputs = {o.name for o in graph.output}

    def pools(n: Any) -> bool:  # a reduction of the tokens' axis, dropped
        return n.op_type in ("ReduceMax", "ReduceSum") and _axes(n, inits) == [1] and _keepdims(n) == 0

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
        _splice(model, [n for n in graph.node if id(n) not in dropped] + added, consts.values())
    _save(model, dst)
    return sum(n.op_type in ("GlobalMaxPool", "MatMulInteger") for n in added)


def _opened(src: Path, rewrite: str | None = None) -> tuple[Any, dict[str, Any], dict[str, Any], dict[str, list[Any]]]:
    """``src`` loaded, and its graph's :func:`_index`. ``rewrite``: a rewrite that writes opset 13-17 nodes
    (Split / Squeeze / Unsqueeze / ReduceSum take axes as inputs, ReduceMax as an attribute), refused
    another opset."""
    import onnx

    model = onnx.load(str(src))
    if rewrite is not None:
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        if opset < 13 or opset > 17:
            raise ValueError(f"{src}: opset {opset}; {rewrite} writes opset 13-17 nodes")
    return (model, *_index(model.graph))


def _axes(n: Any, inits: dict[str, Any]) -> list[int] | None:
    """A reduction's axes: its attribute (ReduceMax at opset ≤ 17), else its initializer input; None unknown."""
    from onnx import numpy_helper

    for a in n.attribute:
        if a.name == "axes":
            return list(a.ints)
    if len(n.input) > 1 and n.input[1] in inits:
        return [int(x) for x in numpy_helper.to_array(inits[n.input[1]])]
    return None


def _keepdims(n: Any) -> int:
    return next((int(a.i) for a in n.attribute if a.name == "keepdims"), 1)


def _splice(model: Any, nodes: list[Any], consts: Any = ()) -> None:
    """The graph's nodes replaced by ``nodes``, ``consts`` added to its initializers, then :func:`_tidy`."""
    graph = model.graph
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(consts)
    _tidy(model)


def _save(model: Any, dst: Path) -> None:
    import onnx

    onnx.checker.check_model(model)
    onnx.save(model, str(dst))


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


__all__ = ["float_activations", "pooled_embeddings", "pooling_kernels"]
