"""Classifier latency, in process: one new step (the real-time path) and a whole 30-step trace.

For each candidate (every exported model under ``build/classifier/onnx/`` and the shipped
``model/artifacts/``), prints p50 / p99 milliseconds of

* ``step``: scoring the newest step of a 30-step trace — representation + tokenize + forward +
  calibration (``ClassifierRuntime.score_step``), with that step's token count;
* ``raw``: tokenize + onnxruntime forward alone, for the same text;
* ``overhead``: ``step − raw``, what our path adds (target ≤ 3 ms);
* ``trace``: scoring all 30 steps (``score_trace``, length-sorted batches of 16);
* ``long``: the newest step of a 1,000-step trace (the grounding line looks every value
  up in all earlier steps, so the representation's cost grows with the trace): the representation
  alone and the whole one-step path.

Traces come from the seeded generator (``model.data.datagen``), one English and one Chinese, each cut to
30 steps; nothing under ``datasets/`` is needed. Run: ``.venv/bin/python bench/classifier.py``
(``--repeats``, ``--threads``, ``--model DIR`` to time one folder). The machine is shared: the load
average is printed with the figures, and ratios within one run are what to compare.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from model.core.schema import Trace
from model.data.datagen import GenerateConfig, generate
from model.scoring.classifier.representation import step_text
from model.scoring.classifier.runtime import DEFAULT_THREADS, MODEL_FILE, ClassifierRuntime

ROOT = Path(__file__).resolve().parent.parent


def _raw_forward(rt: ClassifierRuntime, text: str) -> object:
    """The model's forward on one text, with no representation work around it."""
    return rt.forward(rt.encode([text]))


def thirty_step_traces() -> dict[str, Trace]:
    out: dict[str, Trace] = {}
    for t in generate(GenerateConfig(n_traces=400, seed=5)):
        lang = t.language or "en"
        if lang not in out and len(t.steps) >= 30:
            out[lang] = t.model_copy(update={"steps": t.steps[:30]})
        if len(out) == 2:
            break
    return out


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    for _ in range(min(5, repeats)):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def paired(ours: Callable[[], object], raw: Callable[[], object], repeats: int) -> tuple[list[float], list[float]]:
    for _ in range(5):
        ours()
        raw()
    a, b = [], []
    for i in range(repeats):
        first, second = (ours, raw) if i % 2 == 0 else (raw, ours)
        t0 = time.perf_counter()
        first()
        t1 = time.perf_counter()
        second()
        t2 = time.perf_counter()
        x, y = (t1 - t0) * 1000.0, (t2 - t1) * 1000.0
        a.append(x if first is ours else y)
        b.append(y if first is ours else x)
    return a, b


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def bench(name: str, folder: Path, traces: dict[str, Trace], repeats: int, threads: int) -> None:
    rt = ClassifierRuntime.load(folder, threads=threads)
    for lang, trace in traces.items():
        last = len(trace.steps) - 1
        text = step_text(trace, last, rt.meta.representation)
        tokens = rt.token_count(text)
        step, raw = paired(functools.partial(rt.score_step, trace, last),
                           functools.partial(_raw_forward, rt, text), repeats)
        whole = timed(functools.partial(rt.score_trace, trace), max(10, repeats // 10))
        # paired: each repeat times our path and the raw path back to back, so drift cancels
        over = statistics.median([a - b for a, b in zip(step, raw, strict=True)])
        print(f"{name:<12} {lang}  step p50 {pct(step, .5):6.2f} p99 {pct(step, .99):6.2f} ms ({tokens:3d} tokens) | "
              f"raw p50 {pct(raw, .5):6.2f} | overhead (paired median) {over:5.2f} ms | "
              f"30-step trace p50 {pct(whole, .5):7.1f} p99 {pct(whole, .99):7.1f} ms", flush=True)


def long_trace(trace: Trace, n: int = 1000) -> Trace:
    """``trace``'s agent steps repeated until ``n`` steps (fresh source indices)."""
    body = [s for s in trace.steps if s.kind.value not in ("system", "user_input")]
    steps = list(trace.steps[:2])
    while len(steps) < n:
        for s in body:
            steps.append(s.model_copy(update={"source_index": len(steps)}))
            if len(steps) == n:
                break
    return trace.model_copy(update={"steps": steps})


def bench_long(name: str, folder: Path, trace: Trace, repeats: int, threads: int) -> None:
    rt = ClassifierRuntime.load(folder, threads=threads)
    last = len(trace.steps) - 1
    rep = timed(lambda: step_text(trace, last, rt.meta.representation), repeats)
    step = timed(lambda: rt.score_step(trace, last), repeats)
    print(f"{name:<12} newest step of a {len(trace.steps):,}-step trace: representation p50 {pct(rep, .5):6.2f} "
          f"p99 {pct(rep, .99):6.2f} ms | whole step p50 {pct(step, .5):6.2f} p99 {pct(step, .99):6.2f} ms",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                    help="onnxruntime intra-op threads (default: the server's, %(default)s)")
    ap.add_argument("--model", type=Path, default=None, help="time only this artefact folder")
    args = ap.parse_args()
    candidates: dict[str, Path] = {}
    if args.model is not None:
        candidates[args.model.name] = args.model
    else:
        onnx_root = ROOT / "build" / "classifier" / "onnx"
        if onnx_root.is_dir():
            candidates.update({d.name: d for d in sorted(onnx_root.iterdir()) if (d / MODEL_FILE).exists()})
        if (ROOT / "model" / "artifacts" / MODEL_FILE).exists():
            candidates["shipped"] = ROOT / "model" / "artifacts"
    if not candidates:
        raise SystemExit("no classifier artefact found: run `dvc repro export` (or pass --model DIR)")
    traces = thirty_step_traces()
    print(f"threads {args.threads}, repeats {args.repeats}, load average {os.getloadavg()[0]:.2f} "
          f"({os.cpu_count()} cores)")
    for name, folder in candidates.items():
        bench(name, folder, traces, args.repeats, args.threads)
    long = long_trace(traces["en"])
    for name, folder in candidates.items():
        bench_long(name, folder, long, max(20, args.repeats // 5), args.threads)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
